//! The store behind the contract. One trait, several modes: the `sql` mode
//! keeps records in the regional database next to the payments they create
//! (so claim, payment and completion share transactions); the `raft` mode
//! keeps them in raft-store. The engine in `payments::execute` only talks to
//! this trait, and every scenario test runs against every implementation.
//!
//! Every write by an owner carries the fence of the record it holds; a write
//! whose fence no longer matches is refused with [`StoreError::Fenced`] (I6).

use std::time::Duration;

use async_trait::async_trait;

use super::fingerprint::Fingerprint;
use super::record::{Record, Scope, Status, Step, StoredResponse};
use crate::domain::{PaymentId, TenantId, UnixMillis};
use crate::payments::model::{NewPayment, Payment, PaymentUpdate};

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
}

#[derive(Debug)]
pub enum ClaimOutcome {
    /// This request owns the key; the payment row exists (step
    /// `LOCAL_PAYMENT_CREATED`).
    Claimed(Record),
    /// This request owns the key, but `(tenant, account, merchant reference)`
    /// already belongs to `existing`; no payment was created.
    BusinessKeyTaken { record: Record, existing: PaymentId },
    /// Someone else holds the key: decide with [`super::decide`].
    Existing(Record),
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

/// A row for the outbox, written in the same transaction as the payment's
/// final state (DESIGN §7).
#[derive(Debug, Clone)]
pub struct OutboxEvent {
    pub event_id: String,
    pub event_type: &'static str,
    pub schema_version: i32,
    pub aggregate_id: String,
    pub tenant: TenantId,
    pub payload: String,
    /// The W3C `traceparent` of the span that wrote the event; the publisher
    /// sends it as a message header so consumers join the same trace.
    pub traceparent: Option<String>,
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

#[async_trait]
pub trait IdempotencyStore: Send + Sync + std::fmt::Debug + 'static {
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
    ) -> Result<Option<Record>, StoreError>;

    /// Unfinished records whose lease (or recovery backoff) has run out,
    /// oldest first.
    async fn due_for_recovery(
        &self,
        now: UnixMillis,
        limit: i64,
    ) -> Result<Vec<Record>, StoreError>;

    /// Records in `status`, oldest first, for operators.
    async fn list(&self, status: Status, limit: i64) -> Result<Vec<Record>, StoreError>;

    /// Every principal's record for `(tenant, key)` of the payments
    /// operation, for operators.
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

    async fn payment(
        &self,
        tenant: &TenantId,
        id: &PaymentId,
    ) -> Result<Option<Payment>, StoreError>;

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

    /// Creation time of the oldest unfinished record, for the age gauge.
    async fn oldest_in_progress(&self) -> Result<Option<UnixMillis>, StoreError>;

    /// How many records wait in `UNKNOWN_REQUIRES_RECOVERY`.
    async fn unknown_count(&self) -> Result<i64, StoreError>;

    /// Answers only when the store can serve requests.
    async fn ready(&self) -> Result<(), StoreError>;
}
