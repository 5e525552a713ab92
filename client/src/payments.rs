//! The payments resource: what a caller sends and gets back, and the two
//! operations on it.
//!
//! - [`request`]: [`CreatePayment`], the body of `POST /payments` plus the
//!   call's own key and trace.
//! - [`payment`]: [`Payment`] as the API renders it (either schema) and
//!   [`Created`], a successful `create_payment`.
//! - `create`: [`Client::create_payment`] and what each answer means.
//! - `get`: [`Client::get_payment`].
//!
//! [`Client::create_payment`]: crate::Client::create_payment
//! [`Client::get_payment`]: crate::Client::get_payment

mod create;
mod get;
pub mod payment;
pub mod request;

pub use payment::{Amount, Created, Payment, PaymentStatus};
pub use request::{Channel, CreatePayment};
