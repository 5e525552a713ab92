//! Domain newtypes: parse, don't validate. The newtypes are the `once-domain`
//! crate's (shared with the event path, `once-events`); tenant and principal
//! ids are the edge's (`once_edge::identity`). Both are re-exported here so
//! the node names them all as `crate::domain::…`.

pub use once_domain::{
    Clock, IdempotencyKey, IdempotencyKeyError, ManualClock, Money, MoneyError, PaymentId,
    SystemClock, UnixMillis,
};
pub use once_edge::identity::{PrincipalId, TenantId};
