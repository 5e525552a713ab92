//! Where the contract's records live, as each caller sees them.
//!
//! Two store modes implement it: `sql` keeps records in the regional
//! database next to the payments they create, so claim, payment and finish
//! share transactions ([`crate::sql::SqlStore`]); `raft` keeps records in
//! raft-store and the payments in the regional database
//! ([`crate::raft::RaftStore`]). Every scenario test runs against both.
//!
//! Each caller gets the narrow trait it needs, and nothing else:
//!
//! | trait | caller | |
//! |---|---|---|
//! | [`RequestPath`] | the engine (`engine::execute`) | claim, take over, recovery points, finish |
//! | [`Recovery`] | the recovery worker, operators | due records, fenced takeover, rows left unsettled behind their records |
//! | [`Operators`] | `/admin`, `engine::resolve` | list, find, resolve by hand |
//! | [`Sweeper`] | the replay-window sweeper | expire, purge |
//! | [`Health`] | `/readyz`, gauges | readiness, oldest unfinished, unknown count |
//! | [`PaymentReads`] | `GET /payments/{id}`, `GET /payments`, recovery | the payments repository's reads |
//! | [`Reencryption`] | the re-encryption worker, `GET /admin/keys` | re-seal under the newest key, count what older keys still seal |
//!
//! A payment is created by its claim and settled by its finish, in the same
//! write as the record (I1, I3): those writes go through [`RequestPath`],
//! and each mode hands them to its payments repository inside that write
//! (`sql::payments`, `sql::outbox`, `sql::Materialized`).
//!
//! Every write by an owner carries the fence of the record it holds; a write
//! whose fence no longer matches is refused with [`StoreError::Fenced`] (I6).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::domain::{PaymentId, TenantId, UnixMillis};
use crate::idempotency::fingerprint::Fingerprint;
use crate::idempotency::record::{Record, Scope, Status, Step, StoredResponse};
pub use crate::payments::model::{ListPosition, PaymentFilter, PaymentPage};
use crate::payments::model::{NewPayment, OutboxEvent, Payment, PaymentUpdate};
use crate::payments::response::ResponseSchema;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The record was taken over: this owner must stop and write nothing.
    #[error("fence rejected: the record has a newer owner")]
    Fenced,
    /// The store could not be reached or refused the work; nothing is known
    /// to have been written.
    #[error("store unavailable")]
    Unavailable(#[source] anyhow::Error),
    /// A stored value could not be read back.
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    /// This region is not the tenant's home: nothing was written (raft
    /// mode, DESIGN §6). The caller answers `421` naming the home.
    #[error("tenant is served by region {home} (placement epoch {epoch})")]
    Misdirected { home: String, epoch: u64 },
}

impl From<once_db::BatchFailed> for StoreError {
    fn from(e: once_db::BatchFailed) -> Self {
        Self::Unavailable(e.into())
    }
}

/// The claim and the finish run as conditional jobs of the group commit:
/// on PostgreSQL, a fence found lost is found by a statement whose writes
/// all hang on it, so it wrote nothing (`sql/hot_writes.rs`). A claim maps a
/// fence lost after its own insert to [`StoreError::Corrupt`].
impl once_db::group_commit::Refusal for StoreError {
    fn wrote_nothing(&self) -> bool {
        matches!(self, Self::Fenced)
    }
}

/// A request to own a scoped key, with the payment it would create.
#[derive(Debug, Clone)]
pub struct Claim {
    pub scope: Scope,
    pub fingerprint: Fingerprint,
    pub payment: NewPayment,
    pub now: UnixMillis,
    pub lease: Duration,
    pub trace_id: Option<String>,
    pub region: String,
    /// The shape this request's answer will be rendered with, kept with the
    /// payment where the store can (raft mode) so that any later owner
    /// renders the same bytes ([`Owned::answer_schema`]).
    pub response_schema: ResponseSchema,
}

/// A record the caller now owns, and what its history means for the run.
#[derive(Debug, Clone)]
pub struct Owned {
    pub record: Record,
    /// Whether an earlier owner of this operation may have sent the charge.
    /// When it may have, the run asks the provider by key before charging;
    /// when it cannot have (a claim that created the record, in a mode that
    /// claims straight at `PROVIDER_REQUEST_SENT`), the run charges at once.
    /// The store says which, so the engine never asks which mode it runs on.
    pub charge_may_have_been_sent: bool,
    /// The response schema the operation's first owner rendered its answer
    /// with, where the store keeps it (raft mode: in the payment's facts).
    /// An owner there may answer before its finish is written (decision
    /// 0054), so whoever finishes the operation later renders with this
    /// shape, not its own node's, and the bytes match. `None`: the node's.
    pub answer_schema: Option<ResponseSchema>,
    /// The payment as the operation's first owner claimed it, where the
    /// store keeps it (raft mode: the record's sealed facts). The region
    /// that took the payment is in the answer; an owner that takes the
    /// record over in another region after the first answered (0054) must
    /// render that region, not its own, or a replay would differ from the
    /// first answer (RELIABILITY finding 12). `None`: the claim's own.
    pub facts: Option<NewPayment>,
}

impl Owned {
    /// A record this request created: nobody has called the provider for it.
    pub fn fresh(record: Record) -> Self {
        Self {
            record,
            charge_may_have_been_sent: false,
            answer_schema: None,
            facts: None,
        }
    }

    /// A record taken over from an earlier owner.
    pub fn taken_over(record: Record) -> Self {
        Self {
            record,
            charge_may_have_been_sent: true,
            answer_schema: None,
            facts: None,
        }
    }
}

#[derive(Debug)]
pub enum ClaimOutcome {
    /// This request owns the key, and the payment exists (locally in `sql`
    /// mode, in the record's payload in `raft` mode).
    Claimed(Owned),
    /// This request owns the key, but `(tenant, account, merchant reference)`
    /// already belongs to `existing`; no payment was created.
    BusinessKeyTaken { record: Record, existing: PaymentId },
    /// Someone else holds the key: decide with [`super::decide`].
    Existing(Record),
}

impl ClaimOutcome {
    /// The same outcome, reached by taking an existing record over rather
    /// than creating it: an earlier owner may have called the provider.
    pub fn by_takeover(self) -> Self {
        match self {
            Self::Claimed(owned) => Self::Claimed(Owned {
                charge_may_have_been_sent: true,
                ..owned
            }),
            other => other,
        }
    }
}

/// How a request takes a record it found over. Each is a compare-and-set on
/// the fence it saw, so of two racing requests exactly one wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaim {
    /// The owner's lease expired: keep everything, bump the fence, resume.
    Resume,
    /// `FAILED_RETRYABLE`: run again, keeping the payment id if one exists.
    Restart,
    /// Past the replay window: a new operation under the same key.
    Renew,
}

/// The terminal write of an operation: record, payment and event together.
#[derive(Debug, Clone)]
pub struct Finish {
    pub status: Status,
    pub response: StoredResponse,
    pub payment: Option<PaymentUpdate>,
    pub event: Option<OutboxEvent>,
    pub now: UnixMillis,
    pub expires_at: UnixMillis,
}

/// Who resolved an operation by hand, when, why, and how.
#[derive(Debug, Clone)]
pub struct Resolution {
    pub outcome: ResolvedOutcome,
    pub reason: String,
    pub actor: String,
    pub at: UnixMillis,
    /// End of the resolved record's replay window.
    pub expires_at: UnixMillis,
}

/// An operator's resolution as the audit trail keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    pub tenant: String,
    pub principal: String,
    pub key: String,
    pub payment_id: Option<String>,
    /// `charged` or `not-charged`.
    pub outcome: String,
    pub reason: String,
    pub actor: String,
    pub resolved_at: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolvedOutcome {
    Charged,
    NotCharged,
}

impl ResolvedOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Charged => "charged",
            Self::NotCharged => "not-charged",
        }
    }
}

/// The engine's view: claim a key, take it over, record recovery points,
/// finish. Payments are created and settled inside these writes.
#[async_trait]
pub trait RequestPath: Send + Sync + std::fmt::Debug + 'static {
    /// Insert-first: creates the record if the scoped key is free (and the
    /// payment with it), or returns the record that holds the key.
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError>;

    /// Takes `seen` over if its fence is still `seen.fence`. `None` when
    /// another request won the race.
    async fn reclaim(
        &self,
        seen: &Record,
        how: Reclaim,
        claim: &Claim,
    ) -> Result<Option<ClaimOutcome>, StoreError>;

    async fn load(&self, scope: &Scope) -> Result<Option<Record>, StoreError>;

    /// Records a recovery point, fenced.
    async fn advance(&self, owner: &Record, step: Step, now: UnixMillis) -> Result<(), StoreError>;

    /// Completes or fails replayably, fenced, with the payment and its event.
    async fn finish(&self, owner: &Record, finish: &Finish) -> Result<(), StoreError>;

    /// Marks the operation safe to run again (nothing left the node), fenced.
    async fn fail_retryable(
        &self,
        owner: &Record,
        error_code: &str,
        now: UnixMillis,
        expires_at: UnixMillis,
    ) -> Result<(), StoreError>;

    /// The provider's answer was lost: `UNKNOWN_REQUIRES_RECOVERY`, fenced.
    /// Nobody resumes it before `retry_at`.
    async fn mark_unknown(
        &self,
        owner: &Record,
        now: UnixMillis,
        retry_at: UnixMillis,
    ) -> Result<(), StoreError>;
}

/// Finding and taking over operations nobody is finishing.
#[async_trait]
pub trait Recovery: Send + Sync + std::fmt::Debug + 'static {
    /// Unfinished records whose lease (or recovery backoff) has run out,
    /// oldest first.
    async fn due_for_recovery(
        &self,
        now: UnixMillis,
        limit: i64,
    ) -> Result<Vec<Record>, StoreError>;

    /// Fenced takeover by a caller that does not know the command (the
    /// recovery worker, an operator): an `IN_PROGRESS` record whose lease
    /// expired, or any `UNKNOWN_REQUIRES_RECOVERY` record, becomes this
    /// caller's with a bumped fence and a fresh lease. `None` when another
    /// caller won the race.
    async fn take_over(
        &self,
        seen: &Record,
        now: UnixMillis,
        lease: Duration,
    ) -> Result<Option<Owned>, StoreError>;

    /// Payments this region's database still shows pending although their
    /// operation finished, oldest first, from `after` on (a pass's cursor),
    /// among rows last written before `before`. Only the `raft` mode has
    /// any: it finishes the record in raft-store and then writes the row, and
    /// a crash or a database outage between the two leaves the row behind
    /// (docs/decisions/0053-settling-rows-behind-their-records.md). The
    /// `sql` mode commits record and row in one transaction: nothing here.
    async fn unsettled(
        &self,
        before: UnixMillis,
        after: Option<&ListPosition>,
        limit: i64,
    ) -> Result<UnsettledPage, StoreError> {
        let _ = (before, after, limit);
        Ok(UnsettledPage::default())
    }

    /// Writes `finish`'s payment state to an [`Unsettled`] row, with its
    /// event when this region finished the record (the region that did
    /// wrote the event with its own row otherwise). A row no longer pending
    /// is left as it is: settling twice writes one event.
    async fn settle(&self, unsettled: &Unsettled, finish: &Finish) -> Result<(), StoreError> {
        let _ = (unsettled, finish);
        Err(StoreError::Corrupt(
            "this store mode leaves no payment unsettled".into(),
        ))
    }
}

/// A pending row whose operation's record is final: see
/// [`Recovery::unsettled`].
#[derive(Debug, Clone)]
pub struct Unsettled {
    /// The row, as this region's database holds it.
    pub payment: Payment,
    /// The finished record that created it.
    pub record: Record,
}

/// One pass's worth of [`Unsettled`] rows, and where the next pass goes on.
#[derive(Debug, Clone, Default)]
pub struct UnsettledPage {
    pub rows: Vec<Unsettled>,
    /// The last pending row looked at, settled or not; `None` once the pass
    /// reached the newest (the next one starts from the oldest again).
    pub next: Option<ListPosition>,
}

/// What operators read and decide.
#[async_trait]
pub trait Operators: Send + Sync + std::fmt::Debug + 'static {
    /// Records in `status`, oldest first.
    async fn list(&self, status: Status, limit: i64) -> Result<Vec<Record>, StoreError>;

    /// Every principal's record for `(tenant, key)` of the payments
    /// operation.
    async fn find(&self, tenant: &TenantId, key: &str) -> Result<Vec<Record>, StoreError>;

    /// An operator's verdict on an owned record, applied together with its
    /// audit entry: `finish` completes it (`charged`), `None` makes it
    /// retryable (`not-charged`).
    async fn resolve(
        &self,
        owner: &Record,
        finish: Option<&Finish>,
        audit: &Resolution,
    ) -> Result<(), StoreError>;

    /// The audit trail, newest first: who resolved what, when and why.
    async fn resolutions(&self, limit: i64) -> Result<Vec<AuditEntry>, StoreError>;
}

/// The end of the replay window.
#[async_trait]
pub trait Sweeper: Send + Sync + std::fmt::Debug + 'static {
    /// Purges the stored answers of up to `limit` records past their window,
    /// keeping metadata until `now + retention`. Returns how many.
    async fn expire_batch(
        &self,
        now: UnixMillis,
        retention: Duration,
        limit: i64,
    ) -> Result<u64, StoreError>;

    /// Deletes up to `limit` expired records whose retention has passed.
    async fn purge_batch(&self, now: UnixMillis, limit: i64) -> Result<u64, StoreError>;
}

/// Why a node's store cannot serve requests.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    /// raft-store, the store every region shares, did not answer; this
    /// region's own database did.
    #[error("raft-store, the store every region shares, is unavailable")]
    SharedStore(#[source] StoreError),
    /// This region's own storage.
    #[error(transparent)]
    Here(#[from] StoreError),
}

/// Readiness and the gauges `/metrics` shows.
#[async_trait]
pub trait Health: Send + Sync + std::fmt::Debug + 'static {
    /// Answers only when the store can serve requests; a store that has
    /// not answered `within` is not ready.
    async fn ready(&self, within: Duration) -> Result<(), NotReady>;

    /// Creation time of the oldest unfinished record, for the age gauge.
    async fn oldest_in_progress(&self) -> Result<Option<UnixMillis>, StoreError>;

    /// How many records wait in `UNKNOWN_REQUIRES_RECOVERY`.
    async fn unknown_count(&self) -> Result<i64, StoreError>;

    /// How long ago the shared store's leader was last heard, as this node
    /// last had word of it, aged since (raft mode, decision 0059). `None`
    /// without a shared store (sql mode), a known leader, or a word yet.
    fn shared_store_leader_heard(&self) -> Option<Duration> {
        None
    }

    /// Which of the shared store's groups have a leader in reach, as this
    /// node last had word of them, and which of those its readiness
    /// needs do not (raft mode, decision 0065). `None` without a shared
    /// store.
    fn store_groups(&self) -> Option<once_edge::ops::StoreGroups> {
        None
    }
}

/// The payments repository's reads.
#[async_trait]
pub trait PaymentReads: Send + Sync + std::fmt::Debug + 'static {
    async fn payment(
        &self,
        tenant: &TenantId,
        id: &PaymentId,
    ) -> Result<Option<Payment>, StoreError>;

    /// Up to `limit` (≥ 1) of `tenant`'s payments matching `filter`, in
    /// creation order, strictly after `after`. Keyset pagination: a payment
    /// created while a caller pages through never shifts the ones it has
    /// not reached yet, so each payment that existed when the listing
    /// started is seen exactly once. Another tenant's payments never match.
    async fn list(
        &self,
        tenant: &TenantId,
        filter: &PaymentFilter,
        after: Option<&ListPosition>,
        limit: u32,
    ) -> Result<PaymentPage, StoreError>;
}

/// What the data keys seal in a store (docs/decisions/0031).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SealedCount {
    /// Records holding a blob sealed under a key other than the newest:
    /// while this is above 0, no older key may be removed from the file.
    pub stale: u64,
    /// Stored answers per key id, where the store can count them cheaply
    /// (the `sql` mode's `sealed_with` column).
    pub by_key: Option<std::collections::BTreeMap<String, u64>>,
}

/// Re-encryption after a key rotation (docs/decisions/0031).
#[async_trait]
pub trait Reencryption: Send + Sync + std::fmt::Debug + 'static {
    /// Re-seals, under the newest key, up to `limit` records holding a blob
    /// sealed under an older one; how many it rewrote. Each rewrite is a
    /// compare-and-set on what it read: a record an owner wrote meanwhile
    /// is left alone (its new blob is under the newest key anyway).
    async fn reseal_batch(&self, now: UnixMillis, limit: i64) -> Result<u64, StoreError>;

    /// What the keys seal now.
    async fn sealed_count(&self) -> Result<SealedCount, StoreError>;
}

/// One store mode, seen through each caller's trait. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Stores {
    pub requests: Arc<dyn RequestPath>,
    pub recovery: Arc<dyn Recovery>,
    pub operators: Arc<dyn Operators>,
    pub sweeper: Arc<dyn Sweeper>,
    pub health: Arc<dyn Health>,
    pub payments: Arc<dyn PaymentReads>,
    pub reencryption: Arc<dyn Reencryption>,
}

impl Stores {
    pub fn of<S>(store: S) -> Self
    where
        S: RequestPath + Recovery + Operators + Sweeper + Health + PaymentReads + Reencryption,
    {
        let store = Arc::new(store);
        Self {
            requests: store.clone(),
            recovery: store.clone(),
            operators: store.clone(),
            sweeper: store.clone(),
            health: store.clone(),
            payments: store.clone(),
            reencryption: store,
        }
    }
}
