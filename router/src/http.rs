//! The outermost layer of every route: the server span (continuing the
//! caller's trace), the trace id on every answer, and the one place
//! internal errors are logged.

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use once_node::error::InternalCause;
use once_telemetry::context;
use tracing::field::Empty;
use tracing::{Instrument, error, info_span};

const X_TRACE_ID: HeaderName = HeaderName::from_static("x-trace-id");
const TRACERESPONSE: HeaderName = HeaderName::from_static("traceresponse");

/// Opens the request span (a child of the caller's span when the request
/// carries `traceparent`). A forwarded answer already carries the node's
/// `X-Trace-Id`/`traceresponse` (same trace, the node's span), which is
/// kept; the router's own answers get the router's.
pub async fn observe(request: Request, next: Next) -> Response {
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let span = info_span!(
        "request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = Empty,
        tenant = Empty,
        region = Empty,
        trace_id = Empty,
    );
    context::set_remote_parent(&span, request.headers());
    let span_context = context::span_context(&span);
    span.record("trace_id", tracing::field::display(span_context.trace_id()));

    let mut response = next.run(request).instrument(span.clone()).await;

    let status = response.status().as_u16();
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("otel.status_code", "ERROR");
    }
    if let Some(InternalCause(cause)) = response.extensions().get::<InternalCause>() {
        span.in_scope(|| error!(error = %format!("{cause:#}"), status, "request failed"));
    }
    if span_context.is_valid() {
        let headers = response.headers_mut();
        if let Ok(v) = HeaderValue::try_from(span_context.trace_id().to_string()) {
            headers.entry(X_TRACE_ID).or_insert(v);
        }
        if let Ok(v) = HeaderValue::try_from(context::traceparent(&span_context)) {
            headers.entry(TRACERESPONSE).or_insert(v);
        }
    }
    response
}
