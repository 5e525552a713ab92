//! HTTP handlers of the payments resource. They own the request's edges:
//! authentication, header and body parsing, and turning an [`Answer`] into
//! a response; the contract itself lives in [`crate::engine::execute`].

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::auth::Caller;
use crate::domain::{IdempotencyKey, PaymentId};
use crate::engine::execute::{Answer, CreatePaymentRequest, create_payment};
use crate::error::{ApiError, ErrorBody};
use crate::http::TraceContext;
use crate::metrics::Outcome;
use crate::payments::command::CreatePayment;
use crate::payments::response::{self, PendingBody};
use crate::state::AppState;

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const API_VERSION: &str = "api-version";
/// The API version assumed when a request names none.
pub const DEFAULT_API_VERSION: &str = "2026-11-01";
const SUPPORTED_API_VERSIONS: &[&str] = &[DEFAULT_API_VERSION];

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/payments", post(create).get(crate::lookups::list))
        .route("/payments/{id}", get(fetch))
}

fn idempotency_key(headers: &HeaderMap) -> Result<IdempotencyKey, ApiError> {
    let raw = headers.get(IDEMPOTENCY_KEY).ok_or(ApiError::KeyRequired)?;
    IdempotencyKey::parse(raw.as_bytes()).map_err(|e| ApiError::KeyInvalid(e.to_string()))
}

fn api_version(headers: &HeaderMap) -> Result<String, ApiError> {
    match headers.get(API_VERSION) {
        None => Ok(DEFAULT_API_VERSION.to_owned()),
        Some(v) => v
            .to_str()
            .ok()
            .filter(|v| SUPPORTED_API_VERSIONS.contains(v))
            .map(str::to_owned)
            .ok_or_else(|| {
                ApiError::MalformedJson(format!(
                    "Api-Version must be one of {SUPPORTED_API_VERSIONS:?}"
                ))
            }),
    }
}

/// Create a payment, exactly once per `Idempotency-Key`.
#[utoipa::path(
    post,
    path = "/payments",
    tag = "payments",
    request_body(content = crate::payments::command::PaymentRequest, content_type = "application/json"),
    params(
        ("Idempotency-Key" = String, Header, description = "1-255 printable ASCII characters naming this operation; retries reuse it"),
        ("Api-Version" = Option<String>, Header, description = "API version; defaults to 2026-11-01"),
    ),
    responses(
        (status = 201, description = "Payment created (or replayed, with `Idempotent-Replayed: true`)", body = crate::payments::response::PaymentV2,
            headers(("Idempotent-Replayed" = String, description = "`true` on a replay"), ("Location" = String))),
        (status = 202, description = "Outcome being recovered; retry with the same key", body = PendingBody),
        (status = 400, description = "IDEMPOTENCY_KEY_REQUIRED, IDEMPOTENCY_KEY_INVALID, VALIDATION_FAILED (malformed JSON)", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED", body = ErrorBody),
        (status = 402, description = "INSUFFICIENT_FUNDS (replayed on retry)", body = ErrorBody),
        (status = 409, description = "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST, IDEMPOTENCY_REQUEST_IN_PROGRESS (with Retry-After), DUPLICATE_MERCHANT_REFERENCE (with paymentId)", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: the message names the field", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: retry with the same key", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    trace: TraceContext,
    headers: HeaderMap,
    body: Body,
) -> Response {
    tracing::Span::current().record("tenant", caller.tenant.as_str());
    let result = async {
        let key = idempotency_key(&headers)?;
        let api_version = api_version(&headers)?;
        let body = once_edge::body::read(body, &headers, state.config.body_limit).await?;
        let command = CreatePayment::parse(&body)?;
        let request = CreatePaymentRequest {
            caller,
            key,
            api_version,
            command,
            trace_id: Some(trace.traceparent),
        };
        // Detached: a client that hangs up must not cancel a payment halfway
        // (it would sit IN_PROGRESS until its lease ran out).
        let answer = tokio::spawn(create_payment(state.clone(), request).in_current_span())
            .await
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("payment task failed: {e}")))?;
        answer.map_err(ApiError::from)
    }
    .await;
    match result {
        Ok(answer) => answer_response(answer),
        Err(error) => error_response(error),
    }
}

fn error_response(error: ApiError) -> Response {
    let outcome = Outcome::of_error(error.code());
    let mut response = error.into_response();
    response.extensions_mut().insert(outcome);
    response
}

const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
const ORIGINAL_TRACE: HeaderName = HeaderName::from_static("idempotent-original-trace-id");

fn answer_response(answer: Answer) -> Response {
    match answer {
        Answer::Stored {
            response: stored,
            replayed,
            original_trace_id,
            outcome,
        } => {
            let mut response = Response::new(Body::from(stored.body));
            *response.status_mut() =
                StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let headers = response.headers_mut();
            for (name, value) in &stored.headers {
                if let (Ok(n), Ok(v)) = (
                    HeaderName::try_from(name.as_str()),
                    HeaderValue::try_from(value.as_str()),
                ) {
                    headers.append(n, v);
                }
            }
            if replayed {
                headers.insert(REPLAYED, HeaderValue::from_static("true"));
                if let Some(original) = original_trace_id {
                    // The replay's server span links to the execution it
                    // replays, so the trace view leads from one to the other.
                    if let Some(link) = once_telemetry::context::parse_traceparent(&original) {
                        tracing::Span::current().add_link(link);
                    }
                    if let Ok(v) =
                        HeaderValue::try_from(once_telemetry::context::trace_id_of(&original))
                    {
                        headers.insert(ORIGINAL_TRACE, v);
                    }
                }
            }
            response.extensions_mut().insert(outcome);
            response
        }
        Answer::Pending {
            payment_id,
            retry_after,
        } => {
            let mut response = (
                StatusCode::ACCEPTED,
                Json(response::pending(
                    payment_id.as_ref().map(PaymentId::as_str),
                )),
            )
                .into_response();
            let secs = retry_after.as_secs().max(1);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            response.extensions_mut().insert(Outcome::InProgress);
            response
        }
    }
}

/// Read a payment of the caller's tenant. Another tenant's id is 404.
#[utoipa::path(
    get,
    path = "/payments/{id}",
    tag = "payments",
    params(("id" = String, Path, description = "Payment id, `pay_…`")),
    responses(
        (status = 200, description = "The payment", body = crate::payments::response::PaymentV2),
        (status = 401, description = "UNAUTHORIZED", body = ErrorBody),
        (status = 404, description = "PAYMENT_NOT_FOUND", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn fetch(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = PaymentId::parse(&id).ok_or(ApiError::PaymentNotFound)?;
    let payment = state
        .store
        .payments
        .payment(&caller.tenant, &id)
        .await
        .map_err(|e| ApiError::Unavailable(e.into()))?
        .ok_or(ApiError::PaymentNotFound)?;
    let body = response::render_payment(&payment, state.config.response_schema);
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}
