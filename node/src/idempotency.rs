//! The idempotency contract of DESIGN §4: records, fingerprints, the
//! decision table, and the [`IdempotencyStore`] trait that every store mode
//! implements.

pub mod decision;
pub mod fingerprint;
pub mod record;
pub mod replay_cache;
pub mod store;

pub use decision::{Decision, decide};
pub use fingerprint::Fingerprint;
pub use record::{Record, Scope, Status, Step, StoredResponse};
pub use replay_cache::ReplayCache;
pub use store::{
    Claim, ClaimOutcome, Finish, IdempotencyStore, OutboxEvent, Reclaim, Resolution,
    ResolvedOutcome, StoreError,
};
