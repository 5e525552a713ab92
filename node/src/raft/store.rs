//! The `raft` store mode: records are claimed, fenced and finished in
//! raft-store; the regional database ([`Materialized`]) follows. Implements
//! every trait of [`crate::store`].
//!
//! Nothing readable reaches raft-store: answers and payment facts are
//! sealed and business keys digested ([`DataKeys`]) before a command is
//! proposed, and opened again when a record comes back
//! (docs/decisions/0031-encryption-at-rest.md).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use once_store_client::client::{ClientError, ClientOptions, StoreClient};
use once_store_client::command::{self as rs, Op, Reply, TakeOverKind};
use once_store_client::groups::StoreGroups;
use once_store_client::protocol::{PaymentListQuery, RecordQuery};
use tracing::{instrument, warn};

use super::convert::{PaymentFacts, fence_to_store, payment_of_record, record_from_store};
use super::placement::{Belief, PlacementBeliefs};
use super::reach::StoreReaches;
use crate::data_keys::{DataKeys, Field};
use crate::domain::{PaymentId, TenantId, UnixMillis};
use crate::failpoints::crash_point;
use crate::idempotency::record::{Record, Scope, Status, Step};
use crate::payments::model::{Payment, cut_page};
use crate::sql::Materialized;
use crate::store::{
    AuditEntry, Claim, ClaimOutcome, Finish, Health, ListPosition, NotReady, Operators, Owned,
    PaymentFilter, PaymentPage, PaymentReads, Reclaim, Recovery, Reencryption, RequestPath,
    Resolution, SealedCount, StoreError, Sweeper, Unsettled, UnsettledPage,
};

/// Where raft-store is and who this node is to it.
#[derive(Debug, Clone)]
pub struct RaftStoreConfig {
    /// Client API addresses of the members, this region's member first.
    pub endpoints: Vec<String>,
    /// The groups besides the directory, one per home region
    /// (docs/decisions/0063-a-raft-group-per-home-region.md); empty: one
    /// group.
    pub groups: Vec<String>,
    pub client: ClientOptions,
}

#[derive(Debug)]
pub struct RaftStore {
    /// A client per group, and which group each tenant lives in: a
    /// tenant's commands and reads go to its group; sweeps, scans and
    /// gauges to every group.
    groups: Arc<StoreGroups>,
    reach: StoreReaches,
    local: Materialized,
    region: String,
    placements: PlacementBeliefs,
    keys: Arc<DataKeys>,
}

fn store_error(e: ClientError) -> StoreError {
    StoreError::Unavailable(anyhow::Error::new(e).context("raft-store"))
}

fn unexpected(reply: Reply) -> StoreError {
    StoreError::Corrupt(format!("unexpected raft-store answer {reply:?}"))
}

/// The payment holding a business key, as a `BusinessKeyTaken` names it.
fn holder(payment_id: Option<String>) -> Result<PaymentId, StoreError> {
    payment_id
        .and_then(|id| PaymentId::parse(&id))
        .ok_or_else(|| StoreError::Corrupt("business key held without a payment".into()))
}

/// Records the settling pass reads from raft-store at once.
const SETTLING_READS: usize = 16;

/// The most times a claim re-proposes after learning a newer epoch that
/// still names this region home.
const EPOCH_RETRIES: usize = 3;

impl RaftStore {
    pub fn new(
        config: &RaftStoreConfig,
        region: String,
        local: Materialized,
        keys: Arc<DataKeys>,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            !config.endpoints.is_empty(),
            "the raft store mode needs at least one store endpoint"
        );
        let groups = Arc::new(StoreGroups::new(
            &config.endpoints,
            &config.groups,
            config.client.clone(),
        )?);
        Ok(Self {
            reach: StoreReaches::watch(&groups, &region),
            groups,
            local,
            region,
            placements: PlacementBeliefs::default(),
            keys,
        })
    }

    /// A record as raft-store keeps it, opened into the node's.
    fn record(&self, r: rs::Record) -> Result<Record, StoreError> {
        record_from_store(r, &self.keys)
    }

    /// The directory's client (the only group of a deployment with one).
    pub fn client(&self) -> &StoreClient {
        self.groups.directory()
    }

    /// The client of the group `tenant` lives in.
    async fn tenant_client(&self, tenant: &str) -> Result<&Arc<StoreClient>, StoreError> {
        self.groups.of_tenant(tenant).await.map_err(store_error)
    }

    /// Proposes `op` in `tenant`'s group; once more in the group a refusal
    /// names (the directory assigned the tenant after this node last
    /// looked).
    async fn write(&self, tenant: &str, op: Op, now: UnixMillis) -> Result<Reply, StoreError> {
        let client = self.tenant_client(tenant).await?;
        // Only the directory of a split deployment refuses a tenant it
        // assigned elsewhere: the copy for a second try is made only then.
        if !(self.groups.is_split() && Arc::ptr_eq(client, self.groups.directory())) {
            return client.write_at(op, now.0).await.map_err(store_error);
        }
        match client.write_at(op.clone(), now.0).await {
            Ok(Reply::OtherGroup { group }) => {
                let client = self.groups.learn(tenant, &group).map_err(store_error)?;
                client.write_at(op, now.0).await.map_err(store_error)
            }
            answer => answer.map_err(store_error),
        }
    }

    /// Proposes `op` in every group, summing their counts.
    async fn count_in_every_group(&self, op: Op, now: UnixMillis) -> Result<u64, StoreError> {
        let mut total = 0;
        for (_, client) in self.groups.all() {
            match client
                .write_at(op.clone(), now.0)
                .await
                .map_err(store_error)?
            {
                Reply::Count(n) => total += n,
                other => return Err(unexpected(other)),
            }
        }
        Ok(total)
    }

    /// The epoch to state for `tenant`, read from the store the first time.
    async fn epoch(&self, tenant: &str) -> Result<u64, StoreError> {
        if let Belief::Epoch(epoch) = self.placements.belief(tenant) {
            return Ok(epoch);
        }
        let placement = self
            .tenant_client(tenant)
            .await?
            .placement(tenant)
            .await
            .map_err(store_error)?;
        let epoch = placement.as_ref().map_or(0, |p| p.epoch);
        self.placements.learn(tenant, placement);
        Ok(epoch)
    }

    /// Proposes `build(epoch)` until it is not misdirected, or until the
    /// store names another region home (then: 421 for the caller).
    async fn propose_as_home(
        &self,
        tenant: &str,
        now: UnixMillis,
        build: impl Fn(u64) -> Op,
    ) -> Result<Reply, StoreError> {
        let mut epoch = self.epoch(tenant).await?;
        for _ in 0..EPOCH_RETRIES {
            match self.write(tenant, build(epoch), now).await? {
                Reply::Misdirected { placement } => {
                    self.placements.learn(tenant, Some(placement.clone()));
                    if placement.home != self.region {
                        return Err(StoreError::Misdirected {
                            home: placement.home,
                            epoch: placement.epoch,
                        });
                    }
                    epoch = placement.epoch;
                }
                other => return Ok(other),
            }
        }
        Err(StoreError::Unavailable(anyhow::anyhow!(
            "placement of {tenant} kept changing while claiming"
        )))
    }

    /// The claim as raft-store takes it; without a payment when the
    /// business key turned out to be taken.
    fn new_claim(&self, claim: &Claim, epoch: u64, with_payment: bool) -> rs::NewClaim {
        let p = &claim.payment;
        let scope = claim.scope.to_store();
        rs::NewClaim {
            fingerprint_version: claim.fingerprint.version,
            fingerprint: claim.fingerprint.hash.clone(),
            business_key: with_payment.then(|| {
                self.keys
                    .business_key(p.tenant.as_str(), &p.account_id, &p.merchant_reference)
            }),
            payment_id: with_payment.then(|| p.id.as_str().to_owned()),
            provider_key: with_payment.then(|| p.id.provider_key()),
            // Claimed straight at "the provider may be called": a crash from
            // here on makes recovery ask the provider by key before charging,
            // and the run needs no separate recovery-point write — one WAN
            // consensus round fewer per payment.
            step: if with_payment {
                rs::Step::ProviderRequestSent
            } else {
                rs::Step::Received
            },
            payload: with_payment.then(|| {
                self.keys.seal_payload(
                    &scope,
                    &PaymentFacts::of(p, claim.now, claim.response_schema).encode(),
                )
            }),
            trace_id: claim.trace_id.clone(),
            region: self.region.clone(),
            epoch,
            lease_ms: claim.lease.as_millis() as i64,
            scope,
        }
    }

    /// A record this node now owns: its payment row exists locally before
    /// the caller may call the provider.
    ///
    /// The store's leader stamped its lease by the leader's clock, which
    /// this node's may not match. The node's copy carries the lease by the
    /// node's own clock instead, counted from `asked_at` (when the node
    /// asked, its clock's time): never later than the leader's, since the
    /// leader stamped after that. So the node judges how much lease it has
    /// left without comparing two clocks.
    async fn owned(
        &self,
        record: rs::Record,
        asked_at: UnixMillis,
        lease: Duration,
        how: fn(Record) -> Owned,
    ) -> Result<Owned, StoreError> {
        // The payment was created when the leader stamped its claim: the
        // record's time, which every region answers and lists it by.
        let (mut answer_schema, mut kept) = (None, None);
        if let Some(blob) = &record.payload {
            let facts = PaymentFacts::decode(&self.keys.open_payload(&record.scope, blob)?)?;
            let payment = facts.payment()?;
            self.local
                .upsert_pending(&payment, UnixMillis(record.created_at))
                .await?;
            answer_schema = facts.answer_schema();
            kept = Some(payment);
        }
        let mut owned = self.record(record)?;
        owned.locked_until = asked_at.plus(lease);
        Ok(Owned {
            answer_schema,
            facts: kept,
            ..how(owned)
        })
    }

    fn take_over_op(
        &self,
        seen: &Record,
        kind: TakeOverKind,
        lease: Duration,
        renew: Option<rs::NewClaim>,
    ) -> Op {
        Op::TakeOver {
            scope: seen.scope.to_store(),
            fence: fence_to_store(seen.fence),
            kind,
            region: self.region.clone(),
            lease_ms: lease.as_millis() as i64,
            renew,
        }
    }

    /// A fenced owner write: `Ok` when it applied, `Fenced` when the record
    /// has a newer owner or is finished. An ambiguous outcome is settled by
    /// reading the record back.
    async fn owner_write(
        &self,
        owner: &Record,
        op: Op,
        now: UnixMillis,
        applied: impl Fn(&rs::Record) -> bool,
    ) -> Result<(), StoreError> {
        let tenant = owner.scope.tenant.as_str();
        match self.tenant_client(tenant).await?.write_at(op, now.0).await {
            Ok(Reply::Updated(_)) => Ok(()),
            Ok(Reply::Fenced { .. } | Reply::NotFound) => Err(StoreError::Fenced),
            Ok(other) => Err(unexpected(other)),
            Err(ClientError::Ambiguous(why)) => {
                let scope = owner.scope.to_store();
                let client = self.tenant_client(tenant).await?;
                match client.record(&scope).await.map_err(store_error)? {
                    Some(r) if r.fence == fence_to_store(owner.fence) && applied(&r) => Ok(()),
                    Some(r) if r.fence != fence_to_store(owner.fence) => Err(StoreError::Fenced),
                    _ => Err(StoreError::Unavailable(anyhow::anyhow!(
                        "raft-store write outcome unknown and not applied: {why}"
                    ))),
                }
            }
            Err(e) => Err(store_error(e)),
        }
    }

    /// Completes or fails the record in raft-store (fenced), as `finish`.
    async fn finish_record(&self, owner: &Record, finish: &Finish) -> Result<(), StoreError> {
        let scope = owner.scope.to_store();
        let fence = fence_to_store(owner.fence);
        let response = &self.keys.seal_answer(&scope, &finish.response);
        let op = match finish.status {
            Status::Completed => Op::Complete {
                scope,
                fence,
                response: response.clone(),
                expires_after_ms: finish.expires_at.0 - finish.now.0,
            },
            Status::FailedReplayable => Op::Fail {
                scope,
                fence,
                replayable: true,
                response: Some(response.clone()),
                error_code: None,
                expires_after_ms: finish.expires_at.0 - finish.now.0,
            },
            other => {
                return Err(StoreError::Corrupt(format!(
                    "finish with non-final status {other}"
                )));
            }
        };
        self.owner_write(owner, op, finish.now, |r| {
            r.status == finish.status && r.response.as_ref() == Some(response)
        })
        .await
    }

    /// Applies a finished record's local effects, retrying a few times: the
    /// record is already final in raft-store. Whatever this leaves pending
    /// (a crash here, a database down through the retries) the recovery
    /// worker's settling pass finishes (`crate::settling`, decision 0053).
    async fn apply_locally(
        &self,
        owner: &Record,
        finish: &Finish,
        audit: Option<&Resolution>,
    ) -> Result<(), StoreError> {
        let mut backoff = Duration::from_millis(20);
        for attempt in 1.. {
            match self.local.apply_finish(finish, owner, audit).await {
                Ok(()) => return Ok(()),
                Err(e @ StoreError::Unavailable(_)) if attempt < 4 => {
                    warn!(error = %format!("{e:#}"), attempt, "materializing a finished payment failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff *= 4;
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the loop returns")
    }

    /// The records `query` matches in every group (in one tenant's group
    /// when it names a tenant), at most its limit from each.
    async fn query(&self, query: RecordQuery) -> Result<Vec<Record>, StoreError> {
        let mut found = Vec::new();
        match &query.tenant {
            Some(tenant) => {
                let client = self.tenant_client(tenant).await?;
                found.extend(client.records(query.clone()).await.map_err(store_error)?);
            }
            None => {
                for (_, client) in self.groups.all() {
                    found.extend(client.records(query.clone()).await.map_err(store_error)?);
                }
            }
        }
        found.into_iter().map(|r| self.record(r)).collect()
    }

    /// How many records `query` matches across every group.
    async fn count(&self, query: RecordQuery) -> Result<u64, StoreError> {
        let mut total = 0;
        for (_, client) in self.groups.all() {
            total += client
                .count_records(query.clone())
                .await
                .map_err(store_error)?;
        }
        Ok(total)
    }
}

#[async_trait]
impl RequestPath for RaftStore {
    #[instrument(name = "claim the key", skip_all, fields(db.system = "raft-store"))]
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        let tenant = claim.scope.tenant.as_str();
        let reply = self
            .propose_as_home(tenant, claim.now, |epoch| {
                Op::Claim(self.new_claim(claim, epoch, true))
            })
            .await?;
        match reply {
            Reply::Claimed(record) => Ok(ClaimOutcome::Claimed(
                self.owned(record, claim.now, claim.lease, Owned::fresh)
                    .await?,
            )),
            Reply::Existing(record) => Ok(ClaimOutcome::Existing(self.record(record)?)),
            Reply::BusinessKeyTaken { payment_id, .. } => {
                // Nothing was written: own the key without a payment, so
                // the 409 is stored and replayed like in the sql mode.
                let existing = holder(payment_id)?;
                let reply = self
                    .propose_as_home(tenant, claim.now, |epoch| {
                        Op::Claim(self.new_claim(claim, epoch, false))
                    })
                    .await?;
                match reply {
                    Reply::Claimed(record) => Ok(ClaimOutcome::BusinessKeyTaken {
                        record: self.record(record)?,
                        existing,
                    }),
                    Reply::Existing(record) => Ok(ClaimOutcome::Existing(self.record(record)?)),
                    other => Err(unexpected(other)),
                }
            }
            other => Err(unexpected(other)),
        }
    }

    #[instrument(name = "take over the record", skip_all, fields(db.system = "raft-store"))]
    async fn reclaim(
        &self,
        seen: &Record,
        how: Reclaim,
        claim: &Claim,
    ) -> Result<Option<ClaimOutcome>, StoreError> {
        let (kind, attach) = match how {
            Reclaim::Resume => (TakeOverKind::LeaseExpired, seen.payment_id.is_none()),
            Reclaim::Restart => (TakeOverKind::Restart, seen.payment_id.is_none()),
            Reclaim::Renew => (TakeOverKind::Renew, true),
        };
        let tenant = claim.scope.tenant.as_str();
        let propose = |with_payment: bool| {
            self.propose_as_home(tenant, claim.now, move |epoch| {
                let renew = attach.then(|| self.new_claim(claim, epoch, with_payment));
                self.take_over_op(seen, kind, claim.lease, renew)
            })
        };
        match propose(true).await? {
            Reply::Claimed(record) => Ok(Some(ClaimOutcome::Claimed(
                self.owned(record, claim.now, claim.lease, Owned::taken_over)
                    .await?,
            ))),
            Reply::BusinessKeyTaken { payment_id, .. } => {
                let existing = holder(payment_id)?;
                match propose(false).await? {
                    Reply::Claimed(record) => Ok(Some(ClaimOutcome::BusinessKeyTaken {
                        record: self.record(record)?,
                        existing,
                    })),
                    Reply::Fenced { .. } | Reply::LeaseValid { .. } | Reply::NotFound => Ok(None),
                    other => Err(unexpected(other)),
                }
            }
            Reply::Fenced { .. } | Reply::LeaseValid { .. } | Reply::NotFound => Ok(None),
            other => Err(unexpected(other)),
        }
    }

    #[instrument(name = "load the record", skip_all, fields(db.system = "raft-store"))]
    async fn load(&self, scope: &Scope) -> Result<Option<Record>, StoreError> {
        self.tenant_client(scope.tenant.as_str())
            .await?
            .record_for_replay(&scope.to_store())
            .await
            .map_err(store_error)?
            .map(|r| self.record(r))
            .transpose()
    }

    #[instrument(name = "record a recovery point", skip_all, fields(db.system = "raft-store"))]
    async fn advance(&self, owner: &Record, step: Step, now: UnixMillis) -> Result<(), StoreError> {
        let op = Op::AdvanceStep {
            scope: owner.scope.to_store(),
            fence: fence_to_store(owner.fence),
            step,
        };
        self.owner_write(owner, op, now, |r| r.step >= step).await
    }

    #[instrument(name = "finish the operation", skip_all, fields(db.system = "raft-store"))]
    async fn finish(&self, owner: &Record, finish: &Finish) -> Result<(), StoreError> {
        self.finish_record(owner, finish).await?;
        crash_point("after_record_finished");
        self.apply_locally(owner, finish, None).await
    }

    #[instrument(name = "mark the operation retryable", skip_all, fields(db.system = "raft-store"))]
    async fn fail_retryable(
        &self,
        owner: &Record,
        error_code: &str,
        now: UnixMillis,
        expires_at: UnixMillis,
    ) -> Result<(), StoreError> {
        let op = Op::Fail {
            scope: owner.scope.to_store(),
            fence: fence_to_store(owner.fence),
            replayable: false,
            response: None,
            error_code: Some(error_code.to_owned()),
            expires_after_ms: expires_at.0 - now.0,
        };
        self.owner_write(owner, op, now, |r| r.status == rs::Status::FailedRetryable)
            .await
    }

    #[instrument(name = "mark the outcome unknown", skip_all, fields(db.system = "raft-store"))]
    async fn mark_unknown(
        &self,
        owner: &Record,
        now: UnixMillis,
        retry_at: UnixMillis,
    ) -> Result<(), StoreError> {
        let op = Op::MarkUnknown {
            scope: owner.scope.to_store(),
            fence: fence_to_store(owner.fence),
            retry_after_ms: retry_at.0 - now.0,
        };
        self.owner_write(owner, op, now, |r| {
            r.status == rs::Status::UnknownRequiresRecovery
        })
        .await
    }
}

#[async_trait]
impl Recovery for RaftStore {
    #[instrument(name = "take over for recovery", skip_all, fields(db.system = "raft-store"))]
    async fn take_over(
        &self,
        seen: &Record,
        now: UnixMillis,
        lease: Duration,
    ) -> Result<Option<Owned>, StoreError> {
        let op = self.take_over_op(seen, TakeOverKind::LeaseExpired, lease, None);
        match self.write(seen.scope.tenant.as_str(), op, now).await? {
            Reply::Claimed(record) => Ok(Some(
                self.owned(record, now, lease, Owned::taken_over).await?,
            )),
            Reply::Fenced { .. } | Reply::LeaseValid { .. } | Reply::NotFound => Ok(None),
            other => Err(unexpected(other)),
        }
    }

    /// Pending rows of this region's database, each read against its
    /// record in raft-store: those whose record is final (or expired, which
    /// only a final record becomes) are unsettled. A row whose record is
    /// gone, or now carries a newer payment (the key renewed), is passed
    /// over: nothing tells who finished it.
    async fn unsettled(
        &self,
        before: UnixMillis,
        after: Option<&ListPosition>,
        limit: i64,
    ) -> Result<UnsettledPage, StoreError> {
        let pending = self.local.pending(before, after, limit).await?;
        let next = pending
            .last()
            .filter(|_| pending.len() as i64 == limit)
            .map(|last| ListPosition {
                created_at: last.created_at,
                id: last.id.clone(),
            });
        // Each read is linearizable (a round trip to the leader, across
        // regions from a follower's region): a page's reads go out together.
        let read = |payment: Payment| async move {
            let record = self
                .tenant_client(payment.tenant.as_str())
                .await?
                .record_of_payment(payment.tenant.as_str(), payment.id.as_str())
                .await
                .map_err(store_error)?;
            let Some(record) = record else {
                return Ok(None);
            };
            let record = self.record(record)?;
            let finished = matches!(
                record.status,
                Status::Completed | Status::FailedReplayable | Status::Expired
            );
            Ok(
                (finished && record.payment_id.as_ref() == Some(&payment.id))
                    .then_some(Unsettled { payment, record }),
            )
        };
        let found: Vec<Result<Option<Unsettled>, StoreError>> = futures::stream::iter(pending)
            .map(read)
            .buffered(SETTLING_READS)
            .collect()
            .await;
        let rows = found
            .into_iter()
            .filter_map(Result::transpose)
            .collect::<Result<_, _>>()?;
        Ok(UnsettledPage { rows, next })
    }

    /// The region that finished the record wrote the event: elsewhere only
    /// the row's state follows (a region that created the payment before a
    /// failover, whose row the new home finished).
    async fn settle(&self, unsettled: &Unsettled, finish: &Finish) -> Result<(), StoreError> {
        let here = unsettled.record.region == self.region;
        let finish = Finish {
            event: finish.event.clone().filter(|_| here),
            ..finish.clone()
        };
        self.local
            .apply_finish(&finish, &unsettled.record, None)
            .await
    }

    async fn due_for_recovery(
        &self,
        now: UnixMillis,
        limit: i64,
    ) -> Result<Vec<Record>, StoreError> {
        // Recover only tenants this region is home for (or that have no
        // placement): after a failover the new home finishes what the old
        // one left, and a former home stays out of its way. The store judges
        // that against the placements it holds now (a linearizable read),
        // so neither a stale belief here nor other regions' due records can
        // keep this region from its own.
        self.query(RecordQuery {
            due_at: Some(now.0),
            homed_in: Some(self.region.clone()),
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            ..RecordQuery::default()
        })
        .await
    }
}

#[async_trait]
impl Operators for RaftStore {
    async fn list(&self, status: Status, limit: i64) -> Result<Vec<Record>, StoreError> {
        self.query(RecordQuery {
            status: Some(status),
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            ..RecordQuery::default()
        })
        .await
    }

    async fn find(&self, tenant: &TenantId, key: &str) -> Result<Vec<Record>, StoreError> {
        self.query(RecordQuery {
            tenant: Some(tenant.as_str().to_owned()),
            key: Some(key.to_owned()),
            limit: 1000,
            ..RecordQuery::default()
        })
        .await
        .map(|records| {
            records
                .into_iter()
                .filter(|r| r.scope.operation == crate::idempotency::record::CREATE_PAYMENT)
                .collect()
        })
    }

    #[instrument(name = "apply an operator resolution", skip_all, fields(db.system = "raft-store"))]
    async fn resolve(
        &self,
        owner: &Record,
        finish: Option<&Finish>,
        audit: &Resolution,
    ) -> Result<(), StoreError> {
        match finish {
            Some(finish) => {
                self.finish_record(owner, finish).await?;
                self.apply_locally(owner, finish, Some(audit)).await
            }
            None => {
                self.fail_retryable(owner, "RESOLVED_NOT_CHARGED", audit.at, audit.expires_at)
                    .await?;
                self.local.record_resolution(owner, audit).await
            }
        }
    }

    /// Audit entries live in the regional database of the node that
    /// resolved (they are not replicated): this region's trail.
    async fn resolutions(&self, limit: i64) -> Result<Vec<AuditEntry>, StoreError> {
        self.local.resolutions(limit).await
    }
}

#[async_trait]
impl Sweeper for RaftStore {
    async fn expire_batch(
        &self,
        now: UnixMillis,
        retention: Duration,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let op = Op::Expire {
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            retention_ms: retention.as_millis() as i64,
        };
        self.count_in_every_group(op, now).await
    }

    async fn purge_batch(&self, now: UnixMillis, limit: i64) -> Result<u64, StoreError> {
        let op = Op::Purge {
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
        };
        self.count_in_every_group(op, now).await
    }
}

#[async_trait]
impl Health for RaftStore {
    async fn oldest_in_progress(&self) -> Result<Option<UnixMillis>, StoreError> {
        let oldest = self
            .query(RecordQuery {
                unfinished: true,
                limit: 1,
                ..RecordQuery::default()
            })
            .await?;
        Ok(oldest.iter().map(|r| r.created_at).min())
    }

    async fn unknown_count(&self) -> Result<i64, StoreError> {
        let n = self
            .count(RecordQuery {
                status: Some(rs::Status::UnknownRequiresRecovery),
                ..RecordQuery::default()
            })
            .await?;
        Ok(i64::try_from(n).unwrap_or(i64::MAX))
    }

    fn shared_store_leader_heard(&self) -> Option<Duration> {
        self.reach.leader_heard()
    }

    fn store_groups(&self) -> Option<once_edge::ops::StoreGroups> {
        Some(self.reach.groups())
    }

    /// This region's database first: a region whose own database is down
    /// is not ready whatever raft-store says. Then raft-store as the
    /// nearest member last saw it, this region's first — it had heard from
    /// a leader holding a quorum, and that word is still within its lease
    /// (decision 0058) — from the background watches of the directory and
    /// of this region's group (decision 0063), so the check makes no call
    /// across regions (decision 0059); only when no member answers is the
    /// directory's leader asked, by a linearizable read.
    async fn ready(&self, within: Duration) -> Result<(), NotReady> {
        let started = std::time::Instant::now();
        crate::sql::answers_within(self.local.database(), within).await?;
        let left = within.saturating_sub(started.elapsed());
        let store = async {
            match self.reach.judge() {
                Some(Ok(())) => Ok(()),
                Some(Err(why)) => Err(StoreError::Unavailable(anyhow::anyhow!(why))),
                None => self
                    .groups
                    .directory()
                    .regions()
                    .await
                    .map(drop)
                    .map_err(store_error),
            }
        };
        tokio::time::timeout(left, store)
            .await
            .map_err(|_| {
                NotReady::SharedStore(StoreError::Unavailable(anyhow::anyhow!(
                    "raft-store did not answer in {within:?}"
                )))
            })?
            .map_err(NotReady::SharedStore)
    }
}

#[async_trait]
impl PaymentReads for RaftStore {
    /// From this region's database; a payment whose row another region
    /// holds (made there before a failover, or here before a failback) is
    /// answered from its record in raft-store, so an acknowledged payment
    /// is never a 404 in another region. A record purged past its metadata
    /// retention leaves only the rows: then only the regions holding one
    /// know the payment.
    #[instrument(name = "load the payment", skip_all, fields(db.system = "raft-store"))]
    async fn payment(
        &self,
        tenant: &TenantId,
        id: &PaymentId,
    ) -> Result<Option<Payment>, StoreError> {
        if let Some(payment) = self.local.payment(tenant, id).await? {
            return Ok(Some(payment));
        }
        let record = self
            .tenant_client(tenant.as_str())
            .await?
            .record_of_payment(tenant.as_str(), id.as_str())
            .await
            .map_err(store_error)?;
        match record {
            Some(record) => payment_of_record(&record, &self.keys),
            None => Ok(None),
        }
    }

    /// From raft-store's records, never the regional database: every
    /// region holds the same records, so a listing answers the same
    /// payments in the same order with the same bytes wherever the tenant
    /// is served from, before and after a failover (a region's database
    /// holds only the rows of payments made or taken over there). Each
    /// payment is rendered from its record (`payment_of_record`).
    ///
    /// What a listing cannot show: a record purged past its metadata
    /// retention takes its payment out of the listing, and a key renewed
    /// past its replay window leaves only its newest payment listed (the
    /// record carries one payment). `GET /payments/{id}` still finds such a
    /// payment in a region whose database holds its row. The order is the
    /// record's `created_at`, which is the payment's creation time for
    /// every payment created by its claim or by a key's renewal.
    #[instrument(name = "list the tenant's payments", skip_all, fields(db.system = "raft-store"))]
    async fn list(
        &self,
        tenant: &TenantId,
        filter: &PaymentFilter,
        after: Option<&ListPosition>,
        limit: u32,
    ) -> Result<PaymentPage, StoreError> {
        let query = PaymentListQuery {
            tenant: tenant.as_str().to_owned(),
            // raft-store holds business keys as digests: so do the filters.
            account_id: filter
                .account_id
                .as_ref()
                .map(|a| self.keys.account_digest(tenant.as_str(), a)),
            merchant_reference: filter
                .merchant_reference
                .as_ref()
                .map(|m| self.keys.reference_digest(tenant.as_str(), m)),
            after: after.map(|p| (p.created_at.0, p.id.as_str().to_owned())),
            limit: limit.saturating_add(1),
        };
        let mut records = self
            .tenant_client(tenant.as_str())
            .await?
            .tenant_payments(query)
            .await
            .map_err(store_error)?;
        let more = cut_page(&mut records, limit);
        let next = match records.last() {
            Some(last) if more => Some(ListPosition {
                created_at: UnixMillis(last.created_at),
                id: last
                    .payment_id
                    .as_deref()
                    .and_then(PaymentId::parse)
                    .ok_or_else(|| StoreError::Corrupt("raft-store record: payment id".into()))?,
            }),
            _ => None,
        };
        let mut payments = Vec::with_capacity(records.len());
        for record in &records {
            payments.extend(payment_of_record(record, &self.keys)?);
        }
        Ok(PaymentPage { payments, next })
    }
}

#[async_trait]
impl Reencryption for RaftStore {
    /// Records with a blob under an older key, found by raft-store from the
    /// blobs' headers (it needs no key for that), re-sealed here and
    /// written back with `Op::Reseal`, a compare-and-set on the record as
    /// read: an owner's write in between makes it `Fenced`, and it is
    /// skipped.
    async fn reseal_batch(&self, now: UnixMillis, limit: i64) -> Result<u64, StoreError> {
        let mut resealed = 0;
        for (_, group) in self.groups.all() {
            resealed += self.reseal_in(group, now, limit).await?;
        }
        Ok(resealed)
    }

    async fn sealed_count(&self) -> Result<SealedCount, StoreError> {
        let stale = self
            .count(RecordQuery {
                sealed_not_under: Some(self.keys.ring().sealing_key_id().to_owned()),
                ..RecordQuery::default()
            })
            .await?;
        Ok(SealedCount {
            stale,
            by_key: None,
        })
    }
}

impl RaftStore {
    /// One group's share of [`Reencryption::reseal_batch`].
    async fn reseal_in(
        &self,
        group: &StoreClient,
        now: UnixMillis,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let newest = self.keys.ring().sealing_key_id().to_owned();
        let stale = group
            .records(RecordQuery {
                sealed_not_under: Some(newest.clone()),
                limit: u32::try_from(limit).unwrap_or(u32::MAX),
                ..RecordQuery::default()
            })
            .await
            .map_err(store_error)?;
        let mut resealed = 0;
        for record in stale {
            let fresh = |field: Field, blob: &Option<rs::Sealed>| {
                blob.as_ref()
                    .map(|b| match b.key_id() {
                        Some(id) if id == newest => Ok(b.clone()),
                        _ => self.keys.reseal(field, &record.scope, b),
                    })
                    .transpose()
            };
            let op = Op::Reseal {
                scope: record.scope.clone(),
                fence: record.fence,
                updated_at: record.updated_at,
                payload: fresh(Field::Payload, &record.payload)?,
                response: fresh(Field::Answer, &record.response)?,
                seen_payload: record.payload.clone(),
                seen_response: record.response.clone(),
            };
            match group.write_at(op, now.0).await.map_err(store_error)? {
                Reply::Updated(_) => resealed += 1,
                Reply::Fenced { .. } | Reply::NotFound => {}
                other => return Err(unexpected(other)),
            }
        }
        Ok(resealed)
    }
}
