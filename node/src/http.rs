//! Middleware shared by every route: trace ids, request metrics, and the one
//! place internal errors are logged.

use std::time::Instant;

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::{Instrument, error, info_span};

use crate::error::InternalCause;
use crate::metrics::{Outcome, RequestLabels};
use crate::state::AppState;

const TRACEPARENT: &str = "traceparent";
const X_TRACE_ID: HeaderName = HeaderName::from_static("x-trace-id");

/// The W3C trace id of the request: taken from an incoming `traceparent`,
/// otherwise minted here. Every response carries it as `X-Trace-Id`, and an
/// idempotency record remembers the one that executed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceId(pub String);

impl TraceId {
    fn from_traceparent(value: &HeaderValue) -> Option<Self> {
        // version "-" trace-id "-" parent-id "-" flags
        let mut parts = value.to_str().ok()?.split('-');
        let (version, trace_id) = (parts.next()?, parts.next()?);
        let valid = version.len() == 2
            && trace_id.len() == 32
            && trace_id
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            && trace_id.bytes().any(|b| b != b'0');
        valid.then(|| Self(trace_id.to_owned()))
    }

    fn generate() -> Self {
        Self(format!("{:032x}", rand::random::<u128>() | 1))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for TraceId {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<TraceId>()
            .cloned()
            .unwrap_or_else(TraceId::generate))
    }
}

/// Outermost layer: assigns the trace id, opens the request span, records
/// the latency histogram, and logs internal errors with their cause chain.
pub async fn observe(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let trace_id = request
        .headers()
        .get(TRACEPARENT)
        .and_then(TraceId::from_traceparent)
        .unwrap_or_else(TraceId::generate);
    request.extensions_mut().insert(trace_id.clone());
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let span = info_span!("request", %method, http.route = %route, trace_id = %trace_id.0, status = tracing::field::Empty);

    let mut response = next.run(request).instrument(span.clone()).await;

    let status = response.status().as_u16();
    span.record("status", status);
    if let Some(InternalCause(cause)) = response.extensions().get::<InternalCause>() {
        span.in_scope(|| error!(error = %format!("{cause:#}"), status, "request failed"));
    }
    let outcome = response.extensions().get::<Outcome>().copied();
    let outcome = outcome.unwrap_or(if status >= 500 {
        Outcome::Error
    } else if status >= 400 {
        Outcome::Rejected
    } else {
        Outcome::Executed
    });
    state
        .metrics
        .request_duration
        .get_or_create(&RequestLabels {
            method,
            route,
            status,
            outcome: outcome.as_str().to_owned(),
        })
        .observe(started.elapsed().as_secs_f64());
    if let Ok(v) = HeaderValue::try_from(trace_id.0) {
        response.headers_mut().insert(X_TRACE_ID, v);
    }
    response
}
