//! The payments resource: `POST /payments` under the idempotency contract,
//! and `GET /payments/{id}`.

pub mod command;
pub mod execute;
pub mod model;
pub mod response;
pub mod routes;
