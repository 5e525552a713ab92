//! Middleware shared by every route: the server span and its trace context,
//! request metrics, and the one place internal errors are logged.

use std::time::Instant;

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use once_telemetry::context;
use tracing::field::Empty;
use tracing::{Instrument, error, info_span};

use crate::error::InternalCause;
use crate::metrics::{Outcome, RequestLabels};
use crate::state::AppState;

const X_TRACE_ID: HeaderName = HeaderName::from_static("x-trace-id");
/// The W3C Trace Context Level 2 response header.
const TRACERESPONSE: HeaderName = HeaderName::from_static("traceresponse");

/// The trace context of the request being served: its server span's
/// `traceparent`. An idempotency record remembers the one that executed it,
/// so a replay can name (and link to) the original execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: String,
}

impl TraceContext {
    pub fn trace_id(&self) -> &str {
        context::trace_id_of(&self.traceparent)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for TraceContext {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<TraceContext>()
            .cloned()
            .unwrap_or_else(|| TraceContext {
                traceparent: context::current_traceparent().unwrap_or_default(),
            }))
    }
}

/// Outermost layer: opens the server span (a child of the caller's span
/// when the request carries `traceparent`), records the latency histogram,
/// logs internal errors with their cause chain, and answers with the trace
/// id in `traceresponse` and `X-Trace-Id`.
pub async fn observe(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let span = info_span!(
        "request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = Empty,
        tenant = Empty,
        idempotency.outcome = Empty,
        trace_id = Empty,
        span_id = Empty,
    );
    context::set_remote_parent(&span, request.headers());
    let span_context = context::span_context(&span);
    let trace = TraceContext {
        traceparent: context::traceparent(&span_context),
    };
    span.record("trace_id", tracing::field::display(span_context.trace_id()));
    span.record("span_id", tracing::field::display(span_context.span_id()));
    request.extensions_mut().insert(trace.clone());

    let mut response = next.run(request).instrument(span.clone()).await;

    let status = response.status().as_u16();
    let outcome = response
        .extensions()
        .get::<Outcome>()
        .copied()
        .unwrap_or(if status >= 500 {
            Outcome::Error
        } else if status >= 400 {
            Outcome::Rejected
        } else {
            Outcome::Executed
        });
    span.record("http.response.status_code", status);
    span.record("idempotency.outcome", outcome.as_str());
    if status >= 500 {
        span.record("otel.status_code", "ERROR");
    }
    if let Some(InternalCause(cause)) = response.extensions().get::<InternalCause>() {
        span.in_scope(|| error!(error = %format!("{cause:#}"), status, "request failed"));
    }
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(histogram) = state.metrics.otel_request_duration.get() {
        histogram.record(
            elapsed,
            &[
                opentelemetry::KeyValue::new("http.request.method", method.clone()),
                opentelemetry::KeyValue::new("http.route", route.clone()),
                opentelemetry::KeyValue::new("http.response.status_code", i64::from(status)),
                opentelemetry::KeyValue::new("idempotency.outcome", outcome.as_str()),
            ],
        );
    }
    state
        .metrics
        .request_duration
        .get_or_create(&RequestLabels {
            method,
            route,
            status,
            outcome: outcome.as_str().to_owned(),
        })
        .observe(elapsed);
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::try_from(trace.trace_id()) {
        headers.insert(X_TRACE_ID, v);
    }
    if let Ok(v) = HeaderValue::try_from(trace.traceparent.as_str()) {
        headers.insert(TRACERESPONSE, v);
    }
    response
}
