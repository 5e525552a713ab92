//! What the replicated log carries and what applying it answers: the
//! commands of the state machine (claim, complete, take over, placement …),
//! the records they act on, and the envelope that makes every client command
//! deduplicated by `(client id, sequence)`.
//!
//! These are raft-store's own serde types. They mirror the fields of the
//! node's `idempotency::record::Record` (DESIGN §4); the node maps between
//! the two, so neither crate depends on the other's internals.
//!
//! Everything here is plain data: time is a number the proposer stamped
//! (`ClientRequest::now`), never a clock read during apply, so every member
//! applying the same log reaches the same state.

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch, as stamped by the proposer.
pub type Millis = i64;

/// The key an idempotency record is unique in: `(tenant, principal,
/// operation, key)` (the node's scope; see docs/ARCHITECTURE.md for why the
/// principal is part of it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Scope {
    pub tenant: String,
    pub principal: String,
    pub operation: String,
    pub key: String,
}

/// The business key a payment reserves: `(tenant, account, merchant
/// reference)`. At most one payment holds it, across every region (I1).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BusinessKey {
    pub tenant: String,
    pub account_id: String,
    pub merchant_reference: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Status {
    InProgress,
    Completed,
    FailedReplayable,
    FailedRetryable,
    UnknownRequiresRecovery,
    Expired,
}

impl Status {
    /// Unfinished records: the only ones an owner may still write.
    pub fn is_unfinished(self) -> bool {
        matches!(self, Self::InProgress | Self::UnknownRequiresRecovery)
    }

    /// Finished with a stored answer that never changes inside the window.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::FailedReplayable)
    }

    pub fn can_expire(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::FailedReplayable | Self::FailedRetryable
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Step {
    Received,
    LocalPaymentCreated,
    ProviderRequestSent,
    ProviderConfirmed,
    Completed,
}

/// A response as first sent, replayed byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub schema_version: i32,
}

/// The idempotency record as raft-store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub scope: Scope,
    pub fingerprint_version: i32,
    pub fingerprint: String,
    pub status: Status,
    pub step: Step,
    /// The fencing token: bumped by every takeover, presented by every owner
    /// write (I6).
    pub fence: u64,
    pub locked_until: Millis,
    pub payment_id: Option<String>,
    pub provider_key: Option<String>,
    pub business_key: Option<BusinessKey>,
    /// The operation's facts, opaque to raft-store (the node keeps the
    /// payment it creates here), so whichever region takes the record over
    /// can finish it and materialize the payment in its own database.
    pub payload: Option<Vec<u8>>,
    pub response: Option<StoredResponse>,
    pub error_code: Option<String>,
    pub trace_id: Option<String>,
    pub region: String,
    pub takeovers: i32,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub expires_at: Option<Millis>,
    /// After expiry: when the metadata itself may be purged.
    pub purge_after: Option<Millis>,
}

impl Record {
    pub fn lease_expired(&self, now: Millis) -> bool {
        self.locked_until <= now
    }

    pub fn is_expired(&self, now: Millis) -> bool {
        self.status == Status::Expired
            || (self.status.can_expire() && self.expires_at.is_some_and(|at| at <= now))
    }
}

/// A tenant's home region, its ordered standbys and the epoch that every
/// placement change bumps (DESIGN §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub home: String,
    pub standbys: Vec<String>,
    pub epoch: u64,
    /// The home the tenant was first placed in: where failback returns it.
    pub preferred_home: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RegionStatus {
    Healthy,
    Draining,
    Down,
}

/// What a claim wants to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewClaim {
    pub scope: Scope,
    pub fingerprint_version: i32,
    pub fingerprint: String,
    /// Reserved atomically with the scoped key when present.
    pub business_key: Option<BusinessKey>,
    pub payment_id: Option<String>,
    pub provider_key: Option<String>,
    /// The step the record starts at.
    pub step: Step,
    /// Opaque facts stored with the record (see [`Record::payload`]).
    pub payload: Option<Vec<u8>>,
    pub trace_id: Option<String>,
    /// The claiming region and the placement epoch it believes in.
    pub region: String,
    pub epoch: u64,
    pub lease_ms: i64,
}

/// How a takeover justifies itself; each is a compare-and-set on `fence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TakeOverKind {
    /// The owner's lease ran out (per the command's stamped time).
    LeaseExpired,
    /// `FAILED_RETRYABLE`: run again under the same record.
    Restart,
    /// Past the replay window: a new operation under the same key.
    Renew,
}

/// One state-machine command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Claim(NewClaim),
    /// Finish as `COMPLETED` with the answer to replay. Fenced.
    Complete {
        scope: Scope,
        fence: u64,
        response: StoredResponse,
        expires_at: Millis,
    },
    /// Finish as failed: `replayable` stores an answer (business rejection),
    /// otherwise the operation may run again (`FAILED_RETRYABLE`). Fenced.
    Fail {
        scope: Scope,
        fence: u64,
        replayable: bool,
        response: Option<StoredResponse>,
        error_code: Option<String>,
        expires_at: Millis,
    },
    /// Record a recovery point. Fenced; steps only move forward.
    AdvanceStep {
        scope: Scope,
        fence: u64,
        step: Step,
    },
    /// Fenced takeover; bumps the fence and grants a new lease.
    TakeOver {
        scope: Scope,
        fence: u64,
        kind: TakeOverKind,
        region: String,
        lease_ms: i64,
        /// The command to attach: always replaces the operation on `Renew`;
        /// on `LeaseExpired` and `Restart` it is attached only when the
        /// record has no payment yet (a claim cut off after losing its
        /// business key). Attaching reserves the business key.
        renew: Option<NewClaim>,
    },
    /// The provider's answer was lost: nobody resumes before `retry_at`. Fenced.
    MarkUnknown {
        scope: Scope,
        fence: u64,
        retry_at: Millis,
    },
    /// Recovery learned the outcome of an unknown operation. Fenced.
    Resolve {
        scope: Scope,
        fence: u64,
        completed: bool,
        response: StoredResponse,
        expires_at: Millis,
    },
    /// Purge stored answers of up to `limit` records past their window.
    Expire {
        limit: u32,
        retention_ms: i64,
    },
    /// Delete up to `limit` expired records past their retention.
    Purge {
        limit: u32,
    },
    /// Compare-and-set a tenant's placement on its epoch (`expected_epoch` 0:
    /// the tenant has no placement yet). The new epoch is `expected + 1`.
    SetPlacement {
        tenant: String,
        expected_epoch: u64,
        home: String,
        standbys: Vec<String>,
    },
    SetRegionStatus {
        region: String,
        status: RegionStatus,
    },
}

/// A client's command: deduplicated at apply by `(client, seq)`, so a
/// command retried after a leader change applies once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRequest {
    pub client: u64,
    pub seq: u64,
    /// Every seq of this client below this one has its answer: their dedup
    /// entries may be forgotten.
    pub acked_below: u64,
    /// The proposer's clock, the only time apply ever uses.
    pub now: Millis,
    pub op: Op,
}

/// One raft entry: many client requests committed together (group commit).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    pub requests: Vec<ClientRequest>,
}

impl std::fmt::Display for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "batch of {}", self.requests.len())
    }
}

/// The answer to one op.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The claim won: this caller owns the record, with its fencing token.
    Claimed(Record),
    /// Someone holds the scoped key: decide from the record.
    Existing(Record),
    /// The business key belongs to another payment; nothing was written.
    BusinessKeyTaken {
        payment_id: Option<String>,
        scope: Scope,
    },
    /// The claiming region is not the tenant's home at the stated epoch.
    Misdirected {
        placement: Placement,
    },
    /// A fenced write or takeover that applied; the record as it now is.
    Updated(Record),
    /// The fence did not match, or the record is no longer in a state that
    /// allows this write: the caller must stop (I6).
    Fenced {
        current: Option<Record>,
    },
    /// Takeover refused: the lease is still valid at the stamped time.
    LeaseValid {
        locked_until: Millis,
    },
    NotFound,
    /// Expire/purge: how many records.
    Count(u64),
    Placement(Placement),
    /// Placement CAS lost: the current placement.
    PlacementConflict {
        current: Option<Placement>,
    },
    Ok,
    /// This `(client, seq)` was acknowledged and forgotten long ago; a
    /// client never sends it again, so seeing it is a client bug.
    StaleSequence,
}

/// The replies of one batch, in request order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchReply {
    pub replies: Vec<Reply>,
}
