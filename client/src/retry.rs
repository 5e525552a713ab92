//! The retry loop of a logical call: attempts until an answer is final, the
//! attempt budget is spent or the deadline would pass, with [`Backoff`]
//! between attempts. Which statuses are worth another attempt is decided
//! here, once, for every operation.
//!
//! ```text
//! attempt ──► whole answer? ──no──► AttemptError (timeout, transport) ─┐
//!                 │yes                                                  │
//!             judge(answer) ──final──► return                          │
//!                 │retry (503, 429, 421, 409 in progress, 202 …)        │
//!                 ▼                                                     │
//!   budget spent, or now + backoff ≥ deadline? ──yes──► return last ◄───┘
//!                 │no
//!             wait backoff (Retry-After as floor), attempt again
//! ```
//!
//! Every attempt of a call is the same request (see [`Request`]): retrying
//! is safe because the server deduplicates on the `Idempotency-Key` and
//! compares the body, and a read has nothing to deduplicate.
//!
//! [`Backoff`]: crate::backoff::Backoff

use tokio::time::Instant;

use crate::attempt::{self, Answer, Request};
use crate::client::Client;
use crate::error::AttemptError;

/// What one answer means for its call.
#[derive(Debug)]
pub(crate) enum Verdict<T> {
    /// The call is over, one way or the other.
    Final(T),
    /// Not an answer about the payment yet: try again.
    Retry(AttemptError),
}

/// How a call ended: its final verdict, or the last reason there was none.
#[derive(Debug)]
pub(crate) struct Ended<T> {
    pub result: Result<T, AttemptError>,
    pub attempts: u32,
    /// The last answer's status; `None` if the last attempt got none.
    pub status: Option<u16>,
}

/// Statuses that say nothing final about the request: nothing was done, or
/// what was done is stored under the key and will be answered on a retry.
///
/// - `503` shed, overloaded, dependency down, router's node unreachable;
///   `429` over the tenant's rate; `408` the body was too slow (nothing
///   written); `421` the placement moved under the router.
/// - `500`, `502`, `504`: a bug or a proxy in between. The outcome is
///   unknown, and the API documents a retry with the same key as safe: the
///   stored answer, or a fresh run under the same key, is what comes back.
pub(crate) fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 421 | 429 | 500 | 502 | 503 | 504)
}

/// The `AttemptError` of a retryable answer.
pub(crate) fn retryable(answer: &Answer) -> AttemptError {
    AttemptError::Retryable {
        status: answer.status,
        code: answer.said().error_code,
        message: answer.message(),
        retry_after: answer.retry_after,
    }
}

/// Runs `request` until `judge` calls an answer final or the call's
/// deadline or attempt budget is spent.
pub(crate) async fn until_final<T>(
    client: &Client,
    request: &Request,
    mut judge: impl FnMut(&Answer) -> Verdict<T>,
) -> Ended<T> {
    let config = client.config();
    let own = Instant::now() + config.deadline;
    let deadline = request.until.map_or(own, |until| until.min(own));
    let mut attempts = 0;
    loop {
        attempts += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = config.attempt_timeout.min(left);
        let (verdict, status) = match attempt::send(client, request, attempts, timeout).await {
            Ok(answer) => (judge(&answer), Some(answer.status)),
            Err(failure) => (Verdict::Retry(failure), None),
        };
        let reason = match verdict {
            Verdict::Final(value) => {
                return Ended {
                    result: Ok(value),
                    attempts,
                    status,
                };
            }
            Verdict::Retry(reason) => reason,
        };
        let wait = config
            .backoff
            .delay(attempts - 1, reason.retry_after(), &mut rand::rng());
        let budget_spent = config.max_attempts.is_some_and(|max| attempts >= max);
        // Waiting out a delay that ends past the deadline only to give up
        // then would hide the answer from the caller for nothing.
        if budget_spent || Instant::now() + wait >= deadline {
            return Ended {
                result: Err(reason),
                attempts,
                status,
            };
        }
        tokio::time::sleep(wait).await;
    }
}
