//! Domain newtypes: parse, don't validate. Every value that crosses the API
//! boundary becomes one of these before any business code sees it, so an
//! `IdempotencyKey` or a `Money` in hand is already known to be well formed.

mod clock;
mod idempotency_key;
mod ids;
mod money;

pub use clock::{Clock, ManualClock, SystemClock, UnixMillis};
pub use idempotency_key::{IdempotencyKey, IdempotencyKeyError};
pub use ids::{PaymentId, PrincipalId, TenantId};
pub use money::{Money, MoneyError};
