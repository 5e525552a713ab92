//! The idempotency engine: `POST /payments` run under the contract
//! ([`execute`]: claim, decide, run from the last recovery point, finish),
//! the same run resumed by the recovery worker ([`execute::recover`]), and
//! operators' verdicts on unknown outcomes ([`resolve`]). It sees storage
//! only through [`crate::store`]'s traits and answers with its own
//! [`error::EngineError`]; HTTP is the handlers' concern ([`crate::routes`],
//! [`crate::admin`]).

pub mod error;
pub mod execute;
pub mod resolve;

pub use error::EngineError;
