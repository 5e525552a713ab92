//! Domain newtypes of the payments API: parse, don't validate. Every value
//! that crosses the API boundary becomes one of these before any business
//! code sees it, so an `IdempotencyKey` or a `Money` in hand is already known
//! to be well formed.
//!
//! This crate owns:
//!
//! - [`IdempotencyKey`]: the client's `Idempotency-Key` header;
//! - [`PaymentId`]: payment ids, minted here, and the provider key derived
//!   from one;
//! - [`Money`]: integer minor units in an ISO 4217 currency;
//! - [`Clock`] and [`UnixMillis`]: time as every table stores it, with the
//!   [`ManualClock`] tests move by hand.
//!
//! Tenant and principal ids are not here: they come from the credential and
//! belong to the HTTP edge (`once_edge::identity`); the node's `domain`
//! module re-exports them beside these. Nothing here depends on another
//! workspace crate, so the node and the event path (`once-events`) share it.

mod clock;
mod idempotency_key;
mod ids;
mod money;

pub use clock::{Clock, ManualClock, SystemClock, UnixMillis};
pub use idempotency_key::{IdempotencyKey, IdempotencyKeyError};
pub use ids::PaymentId;
pub use money::{Money, MoneyError};
