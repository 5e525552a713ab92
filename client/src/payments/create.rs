//! `create_payment`: one key and one body for the whole call, retried until
//! the answer is final, and what each final answer means.
//!
//! A `202` (the provider's outcome is being recovered) is polled by sending
//! the same `POST` again, same key, same bytes: that is how the API answers
//! a stored outcome (the replay of the `201` or `402`, byte for byte), and
//! the retry is also what makes the node ask the provider at once instead
//! of waiting for its recovery worker. `GET /payments/{id}` would only show
//! the payment's status, not the answer the call is owed (a decline's
//! `402`, or a `201` with `Idempotent-Replayed`).

use reqwest::Method;

use crate::attempt::{Answer, Request};
use crate::client::Client;
use crate::error::{AttemptError, CreatePaymentError, CreatePaymentErrorKind};
use crate::payments::payment::{Created, Payment};
use crate::payments::request::{CreatePayment, generate_key};
use crate::retry::{self, Verdict};
use crate::trace::TraceParent;

/// The `errorCode`s of a `409` that ask for a retry or end the call.
const IN_PROGRESS: &str = "IDEMPOTENCY_REQUEST_IN_PROGRESS";
const REUSED: &str = "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST";
const DUPLICATE_REFERENCE: &str = "DUPLICATE_MERCHANT_REFERENCE";

/// What a final answer was: the payment with its headers, or a refusal.
type Final = Result<(Payment, bool, Option<String>), CreatePaymentErrorKind>;

impl Client {
    /// Creates a payment exactly once: every attempt carries the same
    /// `Idempotency-Key` (the request's, or one generated for this call)
    /// and the same body bytes, until a final answer or the deadline.
    ///
    /// `Err` with [`CreatePaymentErrorKind::Indeterminate`] means no final
    /// answer came in time; the payment may exist. Call again with
    /// [`CreatePayment::idempotency_key`] set to the error's key to learn
    /// the outcome.
    pub async fn create_payment(
        &self,
        payment: CreatePayment,
    ) -> Result<Created, CreatePaymentError> {
        let key = payment.idempotency_key.clone().unwrap_or_else(generate_key);
        let request = Request {
            operation: "create_payment",
            method: Method::POST,
            url: self
                .config()
                .base_url
                .join("payments")
                .expect("a relative path joins"),
            idempotency_key: Some(key.clone()),
            body: Some(payment.body()),
            trace: payment
                .traceparent
                .clone()
                .unwrap_or_else(TraceParent::generate),
            until: payment.until,
        };
        // The payment a `202` named, kept for an `Indeterminate` ending.
        let mut pending_payment = None;
        let ended = retry::until_final(self, &request, |answer| {
            let verdict = judge(answer);
            if let Verdict::Retry(AttemptError::Pending {
                payment_id: Some(id),
                ..
            }) = &verdict
            {
                pending_payment = Some(id.clone());
            }
            verdict
        })
        .await;
        let result = match ended.result {
            Ok(result) => result,
            Err(last_error) => Err(CreatePaymentErrorKind::Indeterminate {
                last_error,
                payment_id: pending_payment,
            }),
        };
        match result {
            Ok((payment, replayed, region)) => Ok(Created {
                payment,
                replayed,
                idempotency_key: key,
                attempts: ended.attempts,
                region,
            }),
            Err(kind) => Err(CreatePaymentError {
                idempotency_key: key,
                attempts: ended.attempts,
                status: ended.status,
                kind,
            }),
        }
    }
}

/// What one answer to `POST /payments` means (docs/api.md, "Answers").
fn judge(answer: &Answer) -> Verdict<Final> {
    let said = answer.said();
    let code = said.error_code.clone().unwrap_or_default();
    let message = || answer.message();
    let refused = |kind| Verdict::Final(Err(kind));
    match answer.status {
        201 => match serde_json::from_slice::<Payment>(&answer.body) {
            Ok(payment) => Verdict::Final(Ok((payment, answer.replayed, answer.region.clone()))),
            Err(e) => refused(CreatePaymentErrorKind::Unexpected {
                status: 201,
                code: None,
                message: format!("the payment in a 201 did not parse: {e}"),
            }),
        },
        202 => Verdict::Retry(AttemptError::Pending {
            payment_id: said.payment_id,
            retry_after: answer.retry_after,
        }),
        402 => refused(CreatePaymentErrorKind::Declined {
            payment_id: said.payment_id,
            code,
            message: message(),
        }),
        409 if code == IN_PROGRESS => Verdict::Retry(retry::retryable(answer)),
        409 if code == REUSED => refused(CreatePaymentErrorKind::Mismatch { message: message() }),
        409 if code == DUPLICATE_REFERENCE => match said.payment_id {
            Some(payment_id) => refused(CreatePaymentErrorKind::DuplicateMerchantReference {
                payment_id,
                message: message(),
            }),
            None => unexpected(answer),
        },
        400 | 413 | 422 => refused(CreatePaymentErrorKind::Validation {
            status: answer.status,
            code,
            message: message(),
        }),
        401 => refused(CreatePaymentErrorKind::Unauthorized { message: message() }),
        status if retry::retryable_status(status) => Verdict::Retry(retry::retryable(answer)),
        _ => unexpected(answer),
    }
}

fn unexpected(answer: &Answer) -> Verdict<Final> {
    Verdict::Final(Err(CreatePaymentErrorKind::Unexpected {
        status: answer.status,
        code: answer.said().error_code,
        message: answer.message(),
    }))
}
