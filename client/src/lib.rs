//! A client of the once payments API that retries safely.
//!
//! Every caller of `POST /payments` needs the same retry loop, and one
//! mistake in it (a new `Idempotency-Key` per attempt, a body re-serialized
//! differently) turns a timeout into a double charge. This crate is that
//! loop, written once:
//!
//! - **one key per logical call**: the caller's, or a UUID v7 generated for
//!   the call, on every attempt; the body is serialized once and the same
//!   bytes go out every time;
//! - **retries only where the answer says nothing final**: no answer or a
//!   cut-off one, `503`, `429`, `421`, `408`, `5xx`, `409
//!   IDEMPOTENCY_REQUEST_IN_PROGRESS`, and `202` (the provider's outcome is
//!   being recovered: the same `POST` is sent again, which is how the API
//!   answers the stored outcome);
//! - **capped full-jitter exponential backoff**, the server's `Retry-After`
//!   as a floor, and a **total deadline** no attempt or wait goes past;
//! - **never a guess**: a call that runs out of time is
//!   [`Indeterminate`](CreatePaymentErrorKind::Indeterminate) and carries its
//!   key; the same request with that key later gets the final answer;
//! - typed refusals ([`CreatePaymentErrorKind`]), W3C `traceparent` on
//!   every attempt (one trace per call), and an [`Observer`] told about
//!   every attempt.
//!
//! ```no_run
//! use std::time::Duration;
//! use once_client::{Client, CreatePayment, CreatePaymentErrorKind};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::builder("http://127.0.0.1:8080", "sk_demo_…")
//!     .deadline(Duration::from_secs(30))
//!     .build()?;
//! let order = CreatePayment::new("acc_1", "10.00", "EUR", "order-42");
//! match client.create_payment(order.clone()).await {
//!     Ok(created) => println!("{} {:?} (replayed: {})",
//!         created.payment.id, created.payment.status, created.replayed),
//!     Err(e) if e.is_indeterminate() => {
//!         // Unknown, not failed: ask again later under the same key.
//!         let again = order.idempotency_key(e.idempotency_key.clone());
//!         let created = client.create_payment(again).await?;
//!         println!("{}", created.payment.id);
//!     }
//!     Err(e) => match e.kind {
//!         CreatePaymentErrorKind::Declined { payment_id, .. } => println!("declined: {payment_id:?}"),
//!         other => println!("refused: {other}"),
//!     },
//! }
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! | module | owns |
//! |---|---|
//! | [`config`] | [`ClientBuilder`]: deadline, attempt timeout, backoff, attempt budget, user agent, `Api-Version`, observer; checked once |
//! | `client` | [`Client`]: the connection pool and the settings, cheap to clone |
//! | [`payments`] | [`CreatePayment`], [`Payment`], [`Created`]; `create_payment` and `get_payment`, and what each answer of theirs means |
//! | `retry` | the loop of one call: attempts, which statuses are retryable, the deadline |
//! | [`backoff`] | [`Backoff`]: capped full-jitter exponential, `Retry-After` as a floor |
//! | [`webhooks`] | verifying a webhook's `Once-Signature` (tolerance, rotation) |
//! | `attempt` | one HTTP attempt: headers, the timeout, reading the answer, telling the observer |
//! | [`trace`] | [`TraceParent`]: the caller's, or one trace per call |
//! | [`observer`] | [`Observer`] and [`Attempt`] |
//! | [`error`] | [`CreatePaymentError`], [`GetPaymentError`], [`AttemptError`] |
//!
//! ```text
//! create_payment(request)
//!   key  = request's or UUID v7         ─┐ fixed for the call
//!   body = serialize once                 │
//!   trace = request's or a new trace     ─┘
//!   loop: POST /payments (key, body, traceparent) ──► router ──► home node
//!         201 ► Created { payment, replayed, key }      402/409/4xx ► Err(kind, key)
//!         202 / 409 in progress / 421 / 429 / 5xx / no answer ► backoff, again
//!         deadline or budget spent ► Err(Indeterminate { last_error }, key)
//! ```

mod attempt;
pub mod backoff;
mod client;
pub mod config;
pub mod error;
pub mod observer;
pub mod payments;
mod retry;
pub mod trace;
pub mod webhooks;

pub use backoff::Backoff;
pub use client::Client;
pub use config::{BuildError, ClientBuilder, DEFAULT_API_VERSION};
pub use error::{AttemptError, CreatePaymentError, CreatePaymentErrorKind, GetPaymentError};
pub use observer::{Attempt, Observer};
pub use once_domain::{IdempotencyKey, IdempotencyKeyError};
pub use payments::{Amount, Channel, CreatePayment, Created, Payment, PaymentStatus};
pub use trace::{InvalidTraceParent, TraceParent};
