//! The `sql` store mode on the regional database: the claim, the payment it
//! creates and the completion each commit atomically with the rows they
//! belong with. Implements every trait of [`crate::store`].
//!
//! Stored answers are sealed with the node's data keys before they are
//! written and opened when read ([`DataKeys`]; decision 0031).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tracing::instrument;

use sqlx::AnyConnection;

use super::finish::{self, RecordIn};
use super::gathered_writes::{self, FinishRow};
use super::hot_writes::{self, ClaimWrite};
use super::records::{Terminal, unavailable};
use super::{payments, records};
use crate::data_keys::{DataKeys, Field};
use crate::domain::{PaymentId, TenantId, UnixMillis};
use crate::idempotency::record::{Record, Scope, Status, Step};
use crate::payments::model::{NewPayment, Payment};
use crate::store::{
    AuditEntry, Claim, ClaimOutcome, Finish, Health, ListPosition, NotReady, Operators, Owned,
    PaymentFilter, PaymentPage, PaymentReads, Reclaim, Recovery, Reencryption, RequestPath,
    Resolution, SealedCount, StoreError, Sweeper,
};
use once_db::{Database, Dialect};
use once_db::{GatherStats, Gatherer, GroupCommit};

/// The request path's writes go through the database's group commit
/// ([`Database::batches`]); the rest (recovery takeovers, resolutions,
/// sweeps) take its write gate ([`Database::writer`]) one by one, as the
/// batches do.
///
/// On PostgreSQL the claims that wait for the same batch are gathered into
/// one statement, and so are the finishes (decision 0068); on SQLite each
/// is a job of its own.
#[derive(Debug, Clone)]
pub struct SqlStore {
    db: Database,
    keys: Arc<DataKeys>,
    gathered: Option<Gathered>,
}

/// The request path's two hot writes, gathered (PostgreSQL).
#[derive(Debug, Clone)]
struct Gathered {
    claims: Gatherer<Claim, ClaimOutcome, StoreError>,
    finishes: Gatherer<FinishRow, (), StoreError>,
}

impl Gathered {
    fn start(batches: &GroupCommit, keys: Arc<DataKeys>) -> Self {
        let claims = Gatherer::new(
            batches.clone(),
            Arc::new(move |conn, _, claims| {
                let keys = keys.clone();
                Box::pin(async move { claims_in(conn, &claims, &keys).await })
            }),
        );
        let finishes = Gatherer::new(
            batches.clone(),
            Arc::new(|conn, _, finishes| {
                Box::pin(async move { gathered_writes::finishes(conn, &finishes).await })
            }),
        );
        Self { claims, finishes }
    }
}

impl SqlStore {
    pub fn new(db: Database, keys: Arc<DataKeys>) -> Self {
        let gathered =
            (db.dialect == Dialect::Postgres).then(|| Gathered::start(db.batches(), keys.clone()));
        Self { db, keys, gathered }
    }

    /// `finish.response`, sealed for `owner`'s record.
    fn seal(&self, owner: &Record, finish: &Finish) -> once_store_client::command::Sealed {
        self.keys
            .seal_answer(&Scope::to_store(&owner.scope), &finish.response)
    }

    pub fn database(&self) -> &Database {
        &self.db
    }

    /// The group commit in front of the request path's writes.
    pub fn batches(&self) -> &GroupCommit {
        self.db.batches()
    }

    /// Claims and finishes waiting to be gathered into a job (none on
    /// SQLite, which does not gather).
    pub fn gathered_waiting(&self) -> usize {
        self.gathered
            .as_ref()
            .map_or(0, |g| g.claims.waiting() + g.finishes.waiting())
    }

    /// The gathered jobs run so far and the rows they wrote: claims, then
    /// finishes (`None` on SQLite).
    pub fn gather_stats(&self) -> Option<(GatherStats, GatherStats)> {
        self.gathered
            .as_ref()
            .map(|g| (g.claims.stats(), g.finishes.stats()))
    }
}

/// The record a fresh claim wrote, built without reading it back.
fn claimed_record(claim: &Claim) -> Record {
    Record {
        scope: claim.scope.clone(),
        fingerprint_version: claim.fingerprint.version,
        fingerprint: claim.fingerprint.hash.clone(),
        status: Status::InProgress,
        step: records::CLAIMED_AT,
        fence: 1,
        locked_until: claim.now.plus(claim.lease),
        payment_id: Some(claim.payment.id.clone()),
        provider_key: Some(claim.payment.id.provider_key()),
        response: None,
        error_code: None,
        trace_id: claim.trace_id.clone(),
        region: claim.region.clone(),
        takeovers: 0,
        created_at: claim.now,
        updated_at: claim.now,
        expires_at: None,
    }
}

/// A compare-and-set takeover's result: `false` when another caller won.
fn won(write: Result<(), StoreError>) -> Result<bool, StoreError> {
    match write {
        Ok(()) => Ok(true),
        Err(StoreError::Fenced) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Inside the claim's batch: create the pending payment, or find that the
/// business key is already taken and drop the payment from the record.
async fn attach_payment(
    conn: &mut AnyConnection,
    record: Record,
    claim: &Claim,
) -> Result<ClaimOutcome, StoreError> {
    if payments::insert_pending(&mut *conn, &claim.payment, claim.now).await? {
        let id = &claim.payment.id;
        if record.payment_id.as_ref() == Some(id) && record.step == records::CLAIMED_AT {
            return Ok(ClaimOutcome::Claimed(Owned::fresh(record)));
        }
        records::set_payment(&mut *conn, &record.scope, record.fence, id).await?;
        let record = Record {
            step: Step::LocalPaymentCreated,
            payment_id: Some(id.clone()),
            provider_key: Some(id.provider_key()),
            ..record
        };
        return Ok(ClaimOutcome::Claimed(Owned::fresh(record)));
    }
    business_key_taken(conn, record, claim).await
}

/// The claim's business key belongs to another payment: the record we own
/// keeps no payment, and the answer names the one that holds the key.
async fn business_key_taken(
    conn: &mut AnyConnection,
    record: Record,
    claim: &Claim,
) -> Result<ClaimOutcome, StoreError> {
    let existing = payments::id_by_business_key(&mut *conn, &claim.payment)
        .await?
        .ok_or_else(|| StoreError::Corrupt("business key conflict without a payment".into()))?;
    records::forget_payment(&mut *conn, &record.scope, record.fence).await?;
    let record = Record {
        step: Step::Received,
        payment_id: None,
        provider_key: None,
        ..record
    };
    Ok(ClaimOutcome::BusinessKeyTaken { record, existing })
}

/// The record that won the claim's key. Read in the claim's own batch, so it
/// sees a winner earlier in the same batch; the answer waits for the commit
/// like every other.
async fn existing(
    conn: &mut AnyConnection,
    claim: &Claim,
    keys: &DataKeys,
) -> Result<ClaimOutcome, StoreError> {
    records::select(&mut *conn, &claim.scope, keys)
        .await?
        .map(ClaimOutcome::Existing)
        .ok_or_else(|| {
            StoreError::Unavailable(anyhow::anyhow!("record vanished between claim and read"))
        })
}

/// A claim, as one job of a batch: record and payment in one trip
/// (`hot_writes.rs`).
async fn claim_in(
    conn: &mut AnyConnection,
    dialect: Dialect,
    savepoint_move: &'static str,
    claim: &Claim,
    keys: &DataKeys,
) -> Result<ClaimOutcome, StoreError> {
    // First, whatever follows: the query leads with the batch's savepoint
    // move (a one-trip job, `once_db::group_commit`).
    let write = hot_writes::claim(&mut *conn, dialect, savepoint_move, claim).await?;
    after_claim(conn, claim, write, keys).await
}

/// The claims gathered for one batch (PostgreSQL), as one job of it: every
/// record and payment in one statement (`gathered_writes.rs`), then what
/// each claim's row calls for. A claim whose key was taken wrote nothing and
/// is answered with the record that holds it, or with the reason that
/// record cannot be opened; any other error past the statement (a database
/// error above all, which aborts the transaction) fails the whole job,
/// whose writes roll back with it.
async fn claims_in(
    conn: &mut AnyConnection,
    claims: &[Claim],
    keys: &DataKeys,
) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
    let writes = gathered_writes::claims(&mut *conn, claims).await?;
    let mut outcomes = Vec::with_capacity(claims.len());
    for (claim, write) in claims.iter().zip(writes) {
        match after_claim(&mut *conn, claim, write, keys).await {
            // The record that holds the key was read but cannot be opened
            // (tampered with, sealed under an unknown key): that claim's
            // answer alone. Its row wrote nothing, and the read left the
            // transaction as it was.
            Err(e @ StoreError::Corrupt(_)) if !write.claimed => outcomes.push(Err(e)),
            outcome => outcomes.push(Ok(outcome?)),
        }
    }
    Ok(outcomes)
}

/// What a claim's write calls for: the record that holds the key when the
/// claim lost it, the payment that holds the business key when that was
/// taken.
async fn after_claim(
    conn: &mut AnyConnection,
    claim: &Claim,
    write: ClaimWrite,
    keys: &DataKeys,
) -> Result<ClaimOutcome, StoreError> {
    if !write.claimed {
        return existing(conn, claim, keys).await;
    }
    let record = claimed_record(claim);
    if write.payment_created {
        return Ok(ClaimOutcome::Claimed(Owned::fresh(record)));
    }
    // Rare: the business key is taken. We own the record; record that it
    // has no payment, and find the one that holds the key. The record was
    // inserted above, in this transaction: a fence lost now is not a
    // refusal that wrote nothing (`Refusal`), it is a broken store.
    business_key_taken(conn, record, claim)
        .await
        .map_err(|e| match e {
            StoreError::Fenced => {
                StoreError::Corrupt("a record claimed in this batch lost its fence".into())
            }
            e => e,
        })
}

/// A takeover, as one job of a batch: `None` when another caller won.
async fn reclaim_in(
    conn: &mut AnyConnection,
    seen: &Record,
    how: Reclaim,
    claim: &Claim,
    keys: &DataKeys,
) -> Result<Option<ClaimOutcome>, StoreError> {
    let taken = match how {
        Reclaim::Resume => {
            records::take_over(
                &mut *conn,
                seen,
                claim.now,
                claim.lease,
                claim.trace_id.as_deref(),
            )
            .await
        }
        Reclaim::Restart => records::restart(&mut *conn, seen, claim, &claim.payment.id).await,
        Reclaim::Renew => records::renew(&mut *conn, seen, claim, &claim.payment.id).await,
    };
    if !won(taken)? {
        return Ok(None);
    }
    let record = records::select(&mut *conn, &seen.scope, keys)
        .await?
        .ok_or_else(|| StoreError::Corrupt("record vanished inside its own transaction".into()))?;
    let needs_payment = match how {
        // A PostgreSQL claim that lost its business key, cut off before it
        // could drop the payment id from the record, leaves a record at the
        // claimed step naming a payment that was never created: finish that
        // claim now (it must never reach the provider).
        Reclaim::Resume => match (&record.step, &record.payment_id) {
            (Step::Received, _) | (_, None) => true,
            (Step::LocalPaymentCreated | Step::ProviderRequestSent, Some(id)) => {
                !payments::exists(&mut *conn, id).await?
            }
            _ => false,
        },
        Reclaim::Restart => seen.payment_id.is_none(),
        Reclaim::Renew => true,
    };
    let outcome = if needs_payment {
        let payment = NewPayment {
            id: record
                .payment_id
                .clone()
                .unwrap_or_else(|| claim.payment.id.clone()),
            ..claim.payment.clone()
        };
        let claim = Claim {
            payment,
            ..claim.clone()
        };
        attach_payment(conn, record, &claim).await?
    } else {
        ClaimOutcome::Claimed(Owned::fresh(record))
    };
    Ok(Some(outcome.by_takeover()))
}

#[async_trait]
impl RequestPath for SqlStore {
    #[instrument(name = "claim the key", skip_all, fields(db.system = %self.db.system()))]
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        if let Some(gathered) = &self.gathered {
            return gathered.claims.write(claim.clone()).await;
        }
        let (claim, keys, dialect) = (claim.clone(), self.keys.clone(), self.db.dialect);
        self.db
            .batches()
            .run_conditional(Box::new(move |conn, savepoint_move| {
                Box::pin(
                    async move { claim_in(conn, dialect, savepoint_move, &claim, &keys).await },
                )
            }))
            .await
    }

    #[instrument(name = "take over the record", skip_all, fields(db.system = %self.db.system()))]
    async fn reclaim(
        &self,
        seen: &Record,
        how: Reclaim,
        claim: &Claim,
    ) -> Result<Option<ClaimOutcome>, StoreError> {
        let (seen, claim, keys) = (seen.clone(), claim.clone(), self.keys.clone());
        self.db
            .batches()
            .run(Box::new(move |conn| {
                Box::pin(async move { reclaim_in(conn, &seen, how, &claim, &keys).await })
            }))
            .await
    }

    #[instrument(name = "load the record", skip_all, fields(db.system = %self.db.system()))]
    async fn load(&self, scope: &Scope) -> Result<Option<Record>, StoreError> {
        records::select(&self.db.pool, scope, &self.keys).await
    }

    #[instrument(name = "record a recovery point", skip_all, fields(db.system = %self.db.system()))]
    async fn advance(&self, owner: &Record, step: Step, now: UnixMillis) -> Result<(), StoreError> {
        let (scope, fence) = (owner.scope.clone(), owner.fence);
        self.db
            .batches()
            .run(Box::new(move |conn| {
                Box::pin(async move { records::set_step(conn, &scope, fence, step, now).await })
            }))
            .await
    }

    #[instrument(name = "finish the operation", skip_all, fields(db.system = %self.db.system()))]
    async fn finish(&self, owner: &Record, finish: &Finish) -> Result<(), StoreError> {
        let answer = self.seal(owner, finish);
        if let Some(gathered) = &self.gathered {
            let row = FinishRow {
                scope: owner.scope.clone(),
                fence: owner.fence,
                finish: finish.clone(),
                answer,
            };
            return gathered.finishes.write(row).await;
        }
        let (owner, finish, dialect) = (owner.clone(), finish.clone(), self.db.dialect);
        self.db
            .batches()
            .run_conditional(Box::new(move |conn, savepoint_move| {
                Box::pin(async move {
                    hot_writes::finish(
                        conn,
                        dialect,
                        savepoint_move,
                        &owner.scope,
                        owner.fence,
                        &finish,
                        &answer,
                    )
                    .await
                })
            }))
            .await
    }

    #[instrument(name = "mark the operation retryable", skip_all, fields(db.system = %self.db.system()))]
    async fn fail_retryable(
        &self,
        owner: &Record,
        error_code: &str,
        now: UnixMillis,
        expires_at: UnixMillis,
    ) -> Result<(), StoreError> {
        let (owner, error_code) = (owner.clone(), error_code.to_owned());
        self.db
            .batches()
            .run(Box::new(move |conn| {
                Box::pin(async move {
                    let terminal = Terminal {
                        status: Status::FailedRetryable,
                        step: owner.step,
                        answer: None,
                        error_code: Some(&error_code),
                        now,
                        expires_at,
                    };
                    records::finish(conn, &owner.scope, owner.fence, &terminal).await
                })
            }))
            .await
    }

    #[instrument(name = "mark the outcome unknown", skip_all, fields(db.system = %self.db.system()))]
    async fn mark_unknown(
        &self,
        owner: &Record,
        now: UnixMillis,
        retry_at: UnixMillis,
    ) -> Result<(), StoreError> {
        let (scope, fence) = (owner.scope.clone(), owner.fence);
        self.db
            .batches()
            .run(Box::new(move |conn| {
                Box::pin(
                    async move { records::mark_unknown(conn, &scope, fence, now, retry_at).await },
                )
            }))
            .await
    }
}

#[async_trait]
impl Recovery for SqlStore {
    #[instrument(name = "take over for recovery", skip_all, fields(db.system = %self.db.system()))]
    async fn take_over(
        &self,
        seen: &Record,
        now: UnixMillis,
        lease: Duration,
    ) -> Result<Option<Owned>, StoreError> {
        let _writer = self.db.writer().await;
        let mut tx = self.db.pool.begin().await.map_err(unavailable)?;
        if !won(records::take_over(&mut *tx, seen, now, lease, None).await)? {
            tx.rollback().await.map_err(unavailable)?;
            return Ok(None);
        }
        let record = records::select(&mut *tx, &seen.scope, &self.keys).await?;
        tx.commit().await.map_err(unavailable)?;
        Ok(record.map(Owned::taken_over))
    }

    async fn due_for_recovery(
        &self,
        now: UnixMillis,
        limit: i64,
    ) -> Result<Vec<Record>, StoreError> {
        records::due_for_recovery(&self.db.pool, now, limit, &self.keys).await
    }
}

#[async_trait]
impl Operators for SqlStore {
    async fn list(&self, status: Status, limit: i64) -> Result<Vec<Record>, StoreError> {
        records::with_status(&self.db.pool, status, limit, &self.keys).await
    }

    async fn find(&self, tenant: &TenantId, key: &str) -> Result<Vec<Record>, StoreError> {
        records::by_tenant_and_key(&self.db.pool, tenant.as_str(), key, &self.keys).await
    }

    #[instrument(name = "apply an operator resolution", skip_all, fields(db.system = %self.db.system()))]
    async fn resolve(
        &self,
        owner: &Record,
        finish: Option<&Finish>,
        audit: &Resolution,
    ) -> Result<(), StoreError> {
        if let Some(f) = finish {
            let answer = self.seal(owner, f);
            return finish::finish(
                &self.db,
                RecordIn::ThisDatabase { answer: &answer },
                owner,
                f,
                Some(audit),
            )
            .await;
        }
        // Not charged: the operation may run again under the same record.
        let _writer = self.db.writer().await;
        let mut tx = self.db.pool.begin().await.map_err(unavailable)?;
        let terminal = Terminal {
            status: Status::FailedRetryable,
            step: owner.step,
            answer: None,
            error_code: Some("RESOLVED_NOT_CHARGED"),
            now: audit.at,
            expires_at: audit.expires_at,
        };
        match records::finish(&mut *tx, &owner.scope, owner.fence, &terminal).await {
            Ok(()) => {}
            Err(StoreError::Fenced) => {
                tx.rollback().await.map_err(unavailable)?;
                return Err(StoreError::Fenced);
            }
            Err(e) => return Err(e),
        }
        records::insert_resolution(&mut *tx, owner, audit).await?;
        tx.commit().await.map_err(unavailable)
    }

    async fn resolutions(&self, limit: i64) -> Result<Vec<AuditEntry>, StoreError> {
        records::recent_resolutions(&self.db.pool, limit).await
    }
}

#[async_trait]
impl Sweeper for SqlStore {
    async fn expire_batch(
        &self,
        now: UnixMillis,
        retention: Duration,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let _writer = self.db.writer().await;
        records::expire_batch(&self.db.pool, now, now.plus(retention), limit).await
    }

    async fn purge_batch(&self, now: UnixMillis, limit: i64) -> Result<u64, StoreError> {
        let _writer = self.db.writer().await;
        records::purge_batch(&self.db.pool, now, limit).await
    }
}

#[async_trait]
impl Health for SqlStore {
    async fn oldest_in_progress(&self) -> Result<Option<UnixMillis>, StoreError> {
        records::oldest_unfinished(&self.db.pool).await
    }

    async fn ready(&self, within: Duration) -> Result<(), NotReady> {
        Ok(super::answers_within(&self.db, within).await?)
    }

    async fn unknown_count(&self) -> Result<i64, StoreError> {
        records::count_unknown(&self.db.pool).await
    }
}

#[async_trait]
impl PaymentReads for SqlStore {
    #[instrument(name = "load the payment", skip_all, fields(db.system = %self.db.system()))]
    async fn payment(
        &self,
        tenant: &TenantId,
        id: &PaymentId,
    ) -> Result<Option<Payment>, StoreError> {
        payments::select(&self.db.pool, tenant, id).await
    }

    #[instrument(name = "list the tenant's payments", skip_all, fields(db.system = %self.db.system()))]
    async fn list(
        &self,
        tenant: &TenantId,
        filter: &PaymentFilter,
        after: Option<&ListPosition>,
        limit: u32,
    ) -> Result<PaymentPage, StoreError> {
        payments::list(&self.db.pool, tenant, filter, after, limit).await
    }
}

#[async_trait]
impl Reencryption for SqlStore {
    async fn reseal_batch(&self, _now: UnixMillis, limit: i64) -> Result<u64, StoreError> {
        let newest = self.keys.ring().sealing_key_id().to_owned();
        let stale = records::stale_answers(&self.db.pool, &newest, limit).await?;
        let mut resealed = 0;
        for row in stale {
            let fresh =
                self.keys
                    .reseal(Field::Answer, &Scope::to_store(&row.scope), &row.answer)?;
            let _writer = self.db.writer().await;
            if records::reseal(&self.db.pool, &row.scope, &row.answer, &fresh).await? {
                resealed += 1;
            }
        }
        Ok(resealed)
    }

    async fn sealed_count(&self) -> Result<SealedCount, StoreError> {
        let newest = self.keys.ring().sealing_key_id().to_owned();
        let by_key = records::answers_by_key(&self.db.pool).await?;
        let stale = by_key
            .iter()
            .filter(|(id, _)| *id != newest)
            .map(|(_, n)| u64::try_from(*n).unwrap_or(0))
            .sum();
        Ok(SealedCount {
            stale,
            by_key: Some(
                by_key
                    .into_iter()
                    .map(|(id, n)| (id, u64::try_from(n).unwrap_or(0)))
                    .collect(),
            ),
        })
    }
}
