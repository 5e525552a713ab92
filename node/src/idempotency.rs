//! The idempotency contract of DESIGN §4 as plain logic: the record and its
//! state machine, request fingerprints, the decision table, and the cache of
//! finished answers. No I/O: where records live is [`crate::store`]'s
//! concern, what the operations mean is [`crate::payments`]'.

pub mod decision;
pub mod fingerprint;
pub mod record;
pub mod replay_cache;

pub use decision::{Decision, decide};
pub use fingerprint::Fingerprint;
pub use record::{Record, Scope, Status, Step, StoredResponse};
pub use replay_cache::ReplayCache;
