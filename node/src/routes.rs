//! HTTP handlers of the payments resource. They own the request's edges:
//! authentication, header and body parsing, and turning an [`Answer`] into
//! a response; the contract itself lives in [`crate::engine::execute`].

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::auth::Caller;
use crate::domain::PaymentId;
use crate::engine::execute::{Answer, CreatePaymentRequest, create_payment, replay_from_memory};
use crate::error::ApiError;
use crate::http::TraceContext;
use crate::metrics::Outcome;
use crate::payments::answers::{CreateAnswers, FetchAnswers};
use crate::payments::command::CreatePayment;
use crate::payments::headers::{CreateHeaders, api_version, idempotency_key};
use crate::payments::response;
use crate::payments::response::schema::PaymentPath;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/payments", post(create).get(crate::lookups::list))
        .route("/payments/{id}", get(fetch))
        .merge(crate::webhook_routes::router())
}

/// Create a payment, exactly once per `Idempotency-Key`.
#[utoipa::path(
    post,
    path = "/payments",
    operation_id = "createPayment",
    tag = "payments",
    request_body(content = crate::payments::command::PaymentRequest, content_type = "application/json"),
    params(CreateHeaders),
    responses(CreateAnswers),
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
        if let Some(answer) = replay_from_memory(&state, &request) {
            return Ok(answer);
        }
        // Detached: a client that hangs up must not cancel a payment halfway
        // (it would sit IN_PROGRESS until its lease ran out). Boxed, so the
        // task moves a pointer rather than the whole future.
        let payment = Box::pin(create_payment(state.clone(), request).in_current_span());
        let answer = tokio::spawn(payment)
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

/// Read a payment of the caller's tenant. Another tenant's id is 404, and
/// so is a path segment that cannot be an id (not even UTF-8 once decoded).
#[utoipa::path(
    get,
    path = "/payments/{id}",
    operation_id = "getPayment",
    tag = "payments",
    params(PaymentPath),
    responses(FetchAnswers),
    security(("bearer" = []))
)]
pub async fn fetch(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = id
        .ok()
        .and_then(|Path(id)| PaymentId::parse(&id))
        .ok_or(ApiError::PaymentNotFound)?;
    // Answered here and still being finished: as the client was told.
    let payment = match state.finishing.payment(&caller.tenant, &id) {
        Some(payment) => payment,
        None => state
            .store
            .payments
            .payment(&caller.tenant, &id)
            .await
            .map_err(|e| ApiError::Unavailable(e.into()))?
            .ok_or(ApiError::PaymentNotFound)?,
    };
    let body = response::render_payment(&payment, state.config.response_schema);
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}
