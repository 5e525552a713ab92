//! The API's one error type and its stable, machine-readable shape, shared
//! by every role that answers the public (node, router).
//!
//! Use [`ApiError`] in handlers, extractors and middleware: each variant maps
//! to one HTTP status and one documented `errorCode`. Library-level failures
//! (store, provider) are `thiserror` enums of their own modules and become an
//! `ApiError` at the handler boundary. Internal causes never reach the client:
//! they travel to the logging middleware ([`crate::observe`]) in a response
//! extension, so they are logged once, inside the request span, with their
//! whole cause chain.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// Every `errorCode` the API can answer with. The string forms are a public
/// contract: add codes, never rename them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    IdempotencyKeyRequired,
    IdempotencyKeyInvalid,
    IdempotencyKeyMalformed,
    IdempotencyKeyReusedWithDifferentRequest,
    IdempotencyRequestInProgress,
    DuplicateMerchantReference,
    ValidationFailed,
    InsufficientFunds,
    Unauthorized,
    PayloadTooLarge,
    PaymentNotFound,
    NotFound,
    ServiceUnavailable,
    InternalError,
    MisdirectedRequest,
    RegionNotHealthy,
    RateLimited,
    ServiceOverloaded,
    RequestTimeout,
    InvalidPath,
    MethodNotAllowed,
    Forbidden,
    NotImplemented,
}

impl ErrorCode {
    /// Every code. The node's API document test checks this against the
    /// enum's derived schema, so a new code cannot be left out.
    pub const ALL: [ErrorCode; 23] = [
        Self::IdempotencyKeyRequired,
        Self::IdempotencyKeyInvalid,
        Self::IdempotencyKeyMalformed,
        Self::IdempotencyKeyReusedWithDifferentRequest,
        Self::IdempotencyRequestInProgress,
        Self::DuplicateMerchantReference,
        Self::ValidationFailed,
        Self::InsufficientFunds,
        Self::Unauthorized,
        Self::PayloadTooLarge,
        Self::PaymentNotFound,
        Self::NotFound,
        Self::ServiceUnavailable,
        Self::InternalError,
        Self::MisdirectedRequest,
        Self::RegionNotHealthy,
        Self::RateLimited,
        Self::ServiceOverloaded,
        Self::RequestTimeout,
        Self::InvalidPath,
        Self::MethodNotAllowed,
        Self::Forbidden,
        Self::NotImplemented,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::IdempotencyKeyRequired => "IDEMPOTENCY_KEY_REQUIRED",
            Self::IdempotencyKeyInvalid => "IDEMPOTENCY_KEY_INVALID",
            Self::IdempotencyKeyMalformed => "IDEMPOTENCY_KEY_MALFORMED",
            Self::IdempotencyKeyReusedWithDifferentRequest => {
                "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST"
            }
            Self::IdempotencyRequestInProgress => "IDEMPOTENCY_REQUEST_IN_PROGRESS",
            Self::DuplicateMerchantReference => "DUPLICATE_MERCHANT_REFERENCE",
            Self::ValidationFailed => "VALIDATION_FAILED",
            Self::InsufficientFunds => "INSUFFICIENT_FUNDS",
            Self::Unauthorized => "UNAUTHORIZED",
            Self::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Self::PaymentNotFound => "PAYMENT_NOT_FOUND",
            Self::NotFound => "NOT_FOUND",
            Self::ServiceUnavailable => "SERVICE_UNAVAILABLE",
            Self::InternalError => "INTERNAL_ERROR",
            Self::MisdirectedRequest => "MISDIRECTED_REQUEST",
            Self::RegionNotHealthy => "REGION_NOT_HEALTHY",
            Self::RateLimited => "RATE_LIMITED",
            Self::ServiceOverloaded => "SERVICE_OVERLOADED",
            Self::RequestTimeout => "REQUEST_TIMEOUT",
            Self::InvalidPath => "INVALID_PATH",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::Forbidden => "FORBIDDEN",
            Self::NotImplemented => "NOT_IMPLEMENTED",
        }
    }
}

/// The JSON body of every error answer.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ErrorBody {
    pub error_code: ErrorCode,
    pub message: String,
    /// On `DUPLICATE_MERCHANT_REFERENCE`, the payment that already holds the
    /// reference; on `INSUFFICIENT_FUNDS`, the declined payment.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub payment_id: Option<String>,
    /// Only on `MISDIRECTED_REQUEST`: the tenant's home region now.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub home_region: Option<String>,
    /// Only on `MISDIRECTED_REQUEST`: the placement epoch that made it home.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub placement_epoch: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("the Idempotency-Key header is required")]
    KeyRequired,
    #[error("{0}")]
    KeyInvalid(String),
    /// The header starts as a Structured Field string (RFC 8941, the IETF
    /// draft's form) and is not one.
    #[error("{0}")]
    KeyMalformed(String),
    #[error("this Idempotency-Key was already used with a different request")]
    KeyReusedWithDifferentRequest,
    #[error("a request with this Idempotency-Key is still being processed")]
    InProgress { retry_after: Duration },
    #[error("a payment with this merchantReference already exists for this account")]
    DuplicateMerchantReference { payment_id: String },
    #[error("{0}")]
    MalformedJson(String),
    #[error("{0}")]
    InvalidCommand(String),
    #[error("missing or unknown API key")]
    Unauthorized,
    #[error("request body exceeds {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("no such payment")]
    PaymentNotFound,
    #[error("no such route")]
    NotFound,
    #[error("this route does not accept this method")]
    MethodNotAllowed,
    #[error("the service is temporarily unavailable; retry with the same Idempotency-Key")]
    Unavailable(#[source] anyhow::Error),
    #[error("internal error; retry with the same Idempotency-Key")]
    Internal(#[source] anyhow::Error),
    #[error("this tenant is served by region {home}; send the request there")]
    Misdirected { home: String, epoch: u64 },
    /// Operator endpoints only: a failback into a region the router still
    /// counts as down would be undone by its own next health round.
    #[error(
        "region {region} is still down in this router's health checks; fail back once it is healthy"
    )]
    RegionNotHealthy { region: String },
    /// This tenant sent more than its rate allows (token bucket).
    #[error("this tenant is over its request rate; retry after the Retry-After delay")]
    RateLimited { retry_after: Duration },
    /// This tenant already has as many requests in flight as its quota.
    #[error("this tenant has too many requests in flight; retry after the Retry-After delay")]
    TenantBusy { retry_after: Duration },
    /// The listener is at its in-flight limit: shed before any work.
    #[error(
        "the service is overloaded; retry with the same Idempotency-Key after the Retry-After delay"
    )]
    Overloaded { retry_after: Duration },
    /// The request took longer than the server's whole-request deadline.
    #[error(
        "the request did not finish within the server's deadline; retry with the same Idempotency-Key"
    )]
    DeadlineExceeded { deadline: Duration },
    /// The body did not arrive within the body read timeout.
    #[error("the request body did not arrive within {timeout:?}")]
    BodyTimeout { timeout: Duration },
    /// A path that could mean two things (dot segments, encoded dots or slashes).
    #[error(
        "the request path is not in canonical form (dot segments, encoded dots and encoded slashes are refused)"
    )]
    InvalidPath,
    /// A listener that answers only some roles over mutual TLS (a node
    /// behind routers) was called by another.
    #[error("{0}")]
    Forbidden(String),
    /// The operation exists but this deployment's store mode does not
    /// offer it (the reason is the message).
    #[error("{0}")]
    NotImplemented(String),
}

impl ApiError {
    /// One error of every variant, with representative details: what the API
    /// document shows as each answer's examples, and what tests walk to see
    /// every code answered.
    pub fn examples() -> Vec<ApiError> {
        let examples = vec![
            Self::KeyRequired,
            Self::KeyInvalid("Idempotency-Key must not be empty".into()),
            Self::KeyMalformed(
                "Idempotency-Key starts with a double quote but is not a Structured Field string (RFC 8941): unterminated string at 4".into(),
            ),
            Self::KeyReusedWithDifferentRequest,
            Self::InProgress {
                retry_after: Duration::from_secs(2),
            },
            Self::DuplicateMerchantReference {
                payment_id: "pay_019ad9b0c6a97e43b8d33a0b4f6c2e11".into(),
            },
            Self::MalformedJson("body must be a JSON object".into()),
            Self::InvalidCommand("amount: amount must be greater than zero".into()),
            Self::Unauthorized,
            Self::PayloadTooLarge { limit: 16 * 1024 },
            Self::PaymentNotFound,
            Self::NotFound,
            Self::MethodNotAllowed,
            Self::Unavailable(anyhow::anyhow!("database unreachable")),
            Self::Internal(anyhow::anyhow!("a broken invariant")),
            Self::Misdirected {
                home: "us-east".into(),
                epoch: 7,
            },
            Self::RegionNotHealthy {
                region: "us-east".into(),
            },
            Self::RateLimited {
                retry_after: Duration::from_secs(1),
            },
            Self::TenantBusy {
                retry_after: Duration::from_secs(1),
            },
            Self::Overloaded {
                retry_after: Duration::from_secs(1),
            },
            Self::DeadlineExceeded {
                deadline: Duration::from_secs(30),
            },
            Self::BodyTimeout {
                timeout: Duration::from_secs(10),
            },
            Self::InvalidPath,
            Self::Forbidden(
                "this listener answers routers and operators only; the client certificate names spiffe://once/eu-west/node".into(),
            ),
            Self::NotImplemented(
                "webhook endpoints are not offered in the raft store mode yet".into(),
            ),
        ];
        // No wildcard: a new variant does not compile until it is listed above.
        for example in &examples {
            match example {
                Self::KeyRequired
                | Self::KeyInvalid(_)
                | Self::KeyMalformed(_)
                | Self::KeyReusedWithDifferentRequest
                | Self::InProgress { .. }
                | Self::DuplicateMerchantReference { .. }
                | Self::MalformedJson(_)
                | Self::InvalidCommand(_)
                | Self::Unauthorized
                | Self::PayloadTooLarge { .. }
                | Self::PaymentNotFound
                | Self::NotFound
                | Self::MethodNotAllowed
                | Self::Unavailable(_)
                | Self::Internal(_)
                | Self::Misdirected { .. }
                | Self::RegionNotHealthy { .. }
                | Self::RateLimited { .. }
                | Self::TenantBusy { .. }
                | Self::Overloaded { .. }
                | Self::DeadlineExceeded { .. }
                | Self::BodyTimeout { .. }
                | Self::InvalidPath
                | Self::Forbidden(_)
                | Self::NotImplemented(_) => {}
            }
        }
        examples
    }

    pub fn status_code(&self) -> StatusCode {
        match self {
            Self::KeyRequired
            | Self::KeyInvalid(_)
            | Self::KeyMalformed(_)
            | Self::MalformedJson(_) => StatusCode::BAD_REQUEST,
            Self::KeyReusedWithDifferentRequest
            | Self::InProgress { .. }
            | Self::DuplicateMerchantReference { .. }
            | Self::RegionNotHealthy { .. } => StatusCode::CONFLICT,
            Self::RateLimited { .. } | Self::TenantBusy { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Overloaded { .. } | Self::DeadlineExceeded { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::InvalidPath => StatusCode::BAD_REQUEST,
            Self::InvalidCommand(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::PaymentNotFound | Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Misdirected { .. } => StatusCode::MISDIRECTED_REQUEST,
        }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            Self::KeyRequired => ErrorCode::IdempotencyKeyRequired,
            Self::KeyInvalid(_) => ErrorCode::IdempotencyKeyInvalid,
            Self::KeyMalformed(_) => ErrorCode::IdempotencyKeyMalformed,
            Self::KeyReusedWithDifferentRequest => {
                ErrorCode::IdempotencyKeyReusedWithDifferentRequest
            }
            Self::InProgress { .. } => ErrorCode::IdempotencyRequestInProgress,
            Self::DuplicateMerchantReference { .. } => ErrorCode::DuplicateMerchantReference,
            Self::MalformedJson(_) | Self::InvalidCommand(_) => ErrorCode::ValidationFailed,
            Self::Unauthorized => ErrorCode::Unauthorized,
            Self::PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
            Self::PaymentNotFound => ErrorCode::PaymentNotFound,
            Self::NotFound => ErrorCode::NotFound,
            Self::MethodNotAllowed => ErrorCode::MethodNotAllowed,
            Self::Unavailable(_) => ErrorCode::ServiceUnavailable,
            Self::Internal(_) => ErrorCode::InternalError,
            Self::Misdirected { .. } => ErrorCode::MisdirectedRequest,
            Self::RegionNotHealthy { .. } => ErrorCode::RegionNotHealthy,
            Self::RateLimited { .. } | Self::TenantBusy { .. } => ErrorCode::RateLimited,
            Self::Overloaded { .. } => ErrorCode::ServiceOverloaded,
            Self::DeadlineExceeded { .. } => ErrorCode::ServiceUnavailable,
            Self::BodyTimeout { .. } => ErrorCode::RequestTimeout,
            Self::InvalidPath => ErrorCode::InvalidPath,
            Self::Forbidden(_) => ErrorCode::Forbidden,
            Self::NotImplemented(_) => ErrorCode::NotImplemented,
        }
    }

    /// The body a client sees. Also what a replayable failure stores.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error_code: self.code(),
            message: self.to_string(),
            payment_id: match self {
                Self::DuplicateMerchantReference { payment_id } => Some(payment_id.clone()),
                _ => None,
            },
            home_region: match self {
                Self::Misdirected { home, .. } => Some(home.clone()),
                _ => None,
            },
            placement_epoch: match self {
                Self::Misdirected { epoch, .. } => Some(*epoch),
                _ => None,
            },
        }
    }
}

/// Names the tenant's home region on a `421 Misdirected Request`.
pub const HOME_REGION_HEADER: &str = "x-once-home-region";

/// Carries an internal cause from [`ApiError::into_response`] to the
/// error-logging middleware.
#[derive(Debug, Clone)]
pub struct InternalCause(pub Arc<anyhow::Error>);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status_code(), Json(self.body())).into_response();
        match self {
            Self::InProgress { retry_after }
            | Self::RateLimited { retry_after }
            | Self::TenantBusy { retry_after }
            | Self::Overloaded { retry_after } => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, retry_after_secs(retry_after));
            }
            Self::DeadlineExceeded { .. } => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            Self::Misdirected { home, .. } => {
                if let Ok(value) = HeaderValue::from_str(&home) {
                    response.headers_mut().insert(HOME_REGION_HEADER, value);
                }
            }
            Self::Unavailable(cause) | Self::Internal(cause) => {
                response
                    .extensions_mut()
                    .insert(InternalCause(Arc::new(cause)));
            }
            _ => {}
        }
        response
    }
}

/// `Retry-After` in whole seconds, rounded up, never 0 (a 0 invites a
/// client to hammer straight back).
pub fn retry_after_secs(after: Duration) -> HeaderValue {
    HeaderValue::from(after.as_secs_f64().ceil().max(1.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_examples_answer_every_code() {
        let answered: std::collections::HashSet<ErrorCode> =
            ApiError::examples().iter().map(ApiError::code).collect();
        for code in ErrorCode::ALL {
            if code != ErrorCode::InsufficientFunds {
                assert!(
                    answered.contains(&code),
                    "no ApiError answers {}",
                    code.as_str()
                );
            }
        }
        // The one code that is not an ApiError: a provider's decline, stored
        // and replayed as the operation's answer (node payments::response).
        assert!(!answered.contains(&ErrorCode::InsufficientFunds));
    }

    #[test]
    fn edge_refusals_carry_retry_after_and_stable_codes() {
        let cases = [
            (
                ApiError::RateLimited {
                    retry_after: Duration::from_millis(1500),
                },
                429,
                "RATE_LIMITED",
                Some("2"),
            ),
            (
                ApiError::TenantBusy {
                    retry_after: Duration::ZERO,
                },
                429,
                "RATE_LIMITED",
                Some("1"),
            ),
            (
                ApiError::Overloaded {
                    retry_after: Duration::from_secs(1),
                },
                503,
                "SERVICE_OVERLOADED",
                Some("1"),
            ),
            (
                ApiError::DeadlineExceeded {
                    deadline: Duration::from_secs(30),
                },
                503,
                "SERVICE_UNAVAILABLE",
                Some("1"),
            ),
            (
                ApiError::BodyTimeout {
                    timeout: Duration::from_secs(10),
                },
                408,
                "REQUEST_TIMEOUT",
                None,
            ),
            (ApiError::InvalidPath, 400, "INVALID_PATH", None),
            (ApiError::Forbidden("no".into()), 403, "FORBIDDEN", None),
        ];
        for (error, status, code, retry_after) in cases {
            assert_eq!(error.code().as_str(), code);
            let response = error.into_response();
            assert_eq!(response.status().as_u16(), status, "{code}");
            assert_eq!(
                response
                    .headers()
                    .get(header::RETRY_AFTER)
                    .map(|v| v.to_str().unwrap()),
                retry_after,
                "{code}"
            );
        }
    }
}
