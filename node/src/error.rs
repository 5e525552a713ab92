//! The API's one error type and its stable, machine-readable shape.
//!
//! Use [`ApiError`] in handlers and extractors: each variant maps to one HTTP
//! status and one documented `errorCode`. Library-level failures (store,
//! provider) are `thiserror` enums of their own modules and become an
//! `ApiError` at the handler boundary. Internal causes never reach the client:
//! they travel to the logging middleware in a response extension, so they are
//! logged once, inside the request span, with their whole cause chain.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::PaymentId;

/// Every `errorCode` the API can answer with. The string forms are a public
/// contract: add codes, never rename them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    IdempotencyKeyRequired,
    IdempotencyKeyInvalid,
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
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IdempotencyKeyRequired => "IDEMPOTENCY_KEY_REQUIRED",
            Self::IdempotencyKeyInvalid => "IDEMPOTENCY_KEY_INVALID",
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
        }
    }
}

/// The JSON body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    pub error_code: ErrorCode,
    pub message: String,
    /// Only on `DUPLICATE_MERCHANT_REFERENCE`: the payment that already holds the reference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payment_id: Option<String>,
    /// Only on `MISDIRECTED_REQUEST`: the tenant's home region now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub home_region: Option<String>,
    /// Only on `MISDIRECTED_REQUEST`: the placement epoch that made it home.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_epoch: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("the Idempotency-Key header is required")]
    KeyRequired,
    #[error("{0}")]
    KeyInvalid(String),
    #[error("this Idempotency-Key was already used with a different request")]
    KeyReusedWithDifferentRequest,
    #[error("a request with this Idempotency-Key is still being processed")]
    InProgress { retry_after: Duration },
    #[error("a payment with this merchantReference already exists for this account")]
    DuplicateMerchantReference { payment_id: PaymentId },
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
}

impl ApiError {
    pub fn status_code(&self) -> StatusCode {
        match self {
            Self::KeyRequired | Self::KeyInvalid(_) | Self::MalformedJson(_) => {
                StatusCode::BAD_REQUEST
            }
            Self::KeyReusedWithDifferentRequest
            | Self::InProgress { .. }
            | Self::DuplicateMerchantReference { .. }
            | Self::RegionNotHealthy { .. } => StatusCode::CONFLICT,
            Self::InvalidCommand(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::PaymentNotFound | Self::NotFound => StatusCode::NOT_FOUND,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Misdirected { .. } => StatusCode::MISDIRECTED_REQUEST,
        }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            Self::KeyRequired => ErrorCode::IdempotencyKeyRequired,
            Self::KeyInvalid(_) => ErrorCode::IdempotencyKeyInvalid,
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
            Self::Unavailable(_) => ErrorCode::ServiceUnavailable,
            Self::Internal(_) => ErrorCode::InternalError,
            Self::Misdirected { .. } => ErrorCode::MisdirectedRequest,
            Self::RegionNotHealthy { .. } => ErrorCode::RegionNotHealthy,
        }
    }

    /// The body a client sees. Also what a replayable failure stores.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error_code: self.code(),
            message: self.to_string(),
            payment_id: match self {
                Self::DuplicateMerchantReference { payment_id } => Some(payment_id.to_string()),
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
            Self::InProgress { retry_after } => {
                let secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
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
