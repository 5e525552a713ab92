//! The payments resource: `POST /payments` under the idempotency contract,
//! `GET /payments/{id}`, and operators' verdicts on unknown outcomes
//! ([`resolve`]).

pub mod command;
pub mod error;
pub mod execute;
pub mod model;
pub mod resolve;
pub mod response;
pub mod routes;
