//! The per-attempt hook: what one HTTP attempt of a call sent and saw, for
//! load generators, drills and logs.
//!
//! The observer is called once per attempt, after its answer (or failure)
//! and before the client decides what to do next, on the task that runs
//! the call: keep it cheap (count, push to a channel, log a line).

use std::fmt;
use std::time::{Duration, SystemTime};

use once_domain::IdempotencyKey;

/// One HTTP attempt of a logical call.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// `create_payment` or `get_payment`.
    pub operation: &'static str,
    /// The call's key (every attempt of a `create_payment` has the same);
    /// `None` for `get_payment`.
    pub idempotency_key: Option<IdempotencyKey>,
    /// 1 for the first attempt of the call.
    pub number: u32,
    /// The `traceparent` this attempt carried.
    pub traceparent: String,
    pub sent_at: SystemTime,
    pub answered_at: SystemTime,
    /// `answered_at − sent_at`, on the monotonic clock.
    pub elapsed: Duration,
    /// `None` when no answer came (see `transport_error`).
    pub status: Option<u16>,
    /// The answer's `errorCode`, if it was an error.
    pub error_code: Option<String>,
    /// The payment the answer named: a `201`'s `id`, a `202`'s or an
    /// error's `paymentId`.
    pub payment_id: Option<String>,
    /// Why no (whole) answer came: refused, reset, timed out.
    pub transport_error: Option<String>,
    /// `X-Once-Region`: the region whose node answered (through a router).
    pub region: Option<String>,
    /// `Idempotent-Replayed: true`: the stored answer of an earlier attempt.
    pub replayed: bool,
    /// The answer's `Retry-After`.
    pub retry_after: Option<Duration>,
    /// The answer's body exactly as received; `None` when no whole answer
    /// came.
    pub body: Option<bytes::Bytes>,
}

/// Told about every attempt. Implemented for any `Fn(&Attempt)`.
pub trait Observer: Send + Sync + 'static {
    fn attempt(&self, attempt: &Attempt);
}

impl<F> Observer for F
where
    F: Fn(&Attempt) + Send + Sync + 'static,
{
    fn attempt(&self, attempt: &Attempt) {
        self(attempt);
    }
}

impl fmt::Debug for dyn Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Observer")
    }
}
