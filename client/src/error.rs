//! What a call can end with besides success, and why an attempt did not end
//! the call.
//!
//! - [`CreatePaymentError`]: a `create_payment` call's final refusal, or
//!   [`CreatePaymentErrorKind::Indeterminate`] when the deadline (or the
//!   attempt budget) ran out before a final answer. It always carries the
//!   call's `Idempotency-Key`: a call that is indeterminate can be asked
//!   again later with that key, and the server answers what it stored.
//! - [`GetPaymentError`]: the same for `get_payment`.
//! - [`AttemptError`]: why one attempt was not final (no answer, a
//!   retryable status, a pending outcome); the last one is kept in
//!   `Indeterminate`.

use std::time::Duration;

use once_domain::IdempotencyKey;

/// A `create_payment` call that did not create (or replay) a payment.
#[derive(Debug, thiserror::Error)]
#[error("create_payment (Idempotency-Key {idempotency_key:?}, {attempts} attempts): {kind}")]
pub struct CreatePaymentError {
    /// The key every attempt carried; retry the call with it.
    pub idempotency_key: IdempotencyKey,
    /// How many HTTP attempts the call made.
    pub attempts: u32,
    /// The status of the last answer, `None` if the last attempt got none.
    pub status: Option<u16>,
    pub kind: CreatePaymentErrorKind,
}

impl CreatePaymentError {
    pub fn idempotency_key(&self) -> &IdempotencyKey {
        &self.idempotency_key
    }

    /// True when the outcome is unknown: the caller must not assume that no
    /// payment was made, and should ask again with the same key.
    pub fn is_indeterminate(&self) -> bool {
        matches!(self.kind, CreatePaymentErrorKind::Indeterminate { .. })
    }
}

/// The final answers that are not a payment, and `Indeterminate`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreatePaymentErrorKind {
    /// `409 IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST`: this key already
    /// names a different request. Nothing was done for this one.
    #[error("the key was already used with a different request: {message}")]
    Mismatch { message: String },
    /// `409 DUPLICATE_MERCHANT_REFERENCE`: another key already created a
    /// payment for this account and merchant reference.
    #[error("payment {payment_id} already holds this merchant reference")]
    DuplicateMerchantReference { payment_id: String, message: String },
    /// `402`: the provider declined. The API answers the payment's id and
    /// the decline code, not the payment; `get_payment` reads it.
    #[error("declined ({code}): {message}")]
    Declined {
        payment_id: Option<String>,
        code: String,
        message: String,
    },
    /// `400`/`413`/`422`: the request itself is wrong; retrying cannot help.
    #[error("invalid request, HTTP {status} {code}: {message}")]
    Validation {
        status: u16,
        code: String,
        message: String,
    },
    /// `401`: missing or unknown API key.
    #[error("unauthorized: {message}")]
    Unauthorized { message: String },
    /// No final answer before the deadline or the attempt budget ran out.
    /// A payment may or may not exist: ask again with the same key.
    #[error("no final answer; retry later with the same Idempotency-Key (last: {last_error})")]
    Indeterminate {
        last_error: AttemptError,
        /// The payment a `202` named, if one did.
        payment_id: Option<String>,
    },
    /// A final answer the contract does not list (e.g. `404` from a wrong
    /// base URL).
    #[error("unexpected answer, HTTP {status} {code:?}: {message}")]
    Unexpected {
        status: u16,
        code: Option<String>,
        message: String,
    },
}

/// A `get_payment` call that did not read a payment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GetPaymentError {
    /// `404 PAYMENT_NOT_FOUND` (also another tenant's payment).
    #[error("no such payment")]
    NotFound,
    #[error("unauthorized: {message}")]
    Unauthorized { message: String },
    #[error("no answer before the deadline (last: {last_error})")]
    Indeterminate { last_error: AttemptError },
    #[error("unexpected answer, HTTP {status} {code:?}: {message}")]
    Unexpected {
        status: u16,
        code: Option<String>,
        message: String,
    },
}

/// Why one attempt did not end the call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttemptError {
    /// No whole answer within the attempt's timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The connection failed: refused, reset, closed mid-answer.
    #[error("transport error: {0}")]
    Transport(String),
    /// An answer that says "not now": `503`, `429`, `421`, `409` in progress…
    #[error("HTTP {status} {}: {message}", code.as_deref().unwrap_or("-"))]
    Retryable {
        status: u16,
        code: Option<String>,
        message: String,
        retry_after: Option<Duration>,
    },
    /// `202`: the provider's outcome is being recovered.
    #[error("HTTP 202: the outcome is being recovered (payment {payment_id:?})")]
    Pending {
        payment_id: Option<String>,
        retry_after: Option<Duration>,
    },
}

impl AttemptError {
    /// The server's `Retry-After`, if the answer had one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Retryable { retry_after, .. } | Self::Pending { retry_after, .. } => *retry_after,
            Self::Timeout(_) | Self::Transport(_) => None,
        }
    }

    /// True when the attempt timed out without an answer.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout(_))
    }
}
