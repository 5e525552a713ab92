//! The outermost layer of every role's routes: the server span (a child of
//! the caller's span when the request carries `traceparent`), the trace id
//! on every answer (`X-Trace-Id`, W3C `traceresponse`), and the one place
//! internal errors are logged, inside the span, with their cause chain.
//! A role that wants more (the node's latency histogram by idempotency
//! outcome) hands an [`Observer`] that sees each finished request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use once_telemetry::context;
use tracing::field::Empty;
use tracing::{Instrument, Span, error, info_span};

use crate::error::InternalCause;

pub const X_TRACE_ID: HeaderName = HeaderName::from_static("x-trace-id");
/// The W3C Trace Context Level 2 response header.
pub const TRACERESPONSE: HeaderName = HeaderName::from_static("traceresponse");

/// The trace context of the request being served: its server span's
/// `traceparent`. A node's idempotency record remembers the one that
/// executed it, so a replay can name (and link to) the original execution.
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

/// What an [`Observer`] learns of a finished request.
#[derive(Debug)]
pub struct Finished<'a> {
    pub method: &'a str,
    pub route: &'a str,
    pub elapsed: Duration,
    pub span: &'a Span,
}

/// A role's own bookkeeping of each finished request (metrics).
pub trait Observer: Send + Sync + 'static {
    fn finished(&self, request: &Finished<'_>, response: &Response);
}

/// No bookkeeping beyond the span and the trace headers.
#[derive(Debug, Clone, Copy)]
pub struct SpanOnly;

impl Observer for SpanOnly {
    fn finished(&self, _: &Finished<'_>, _: &Response) {}
}

/// Whose trace headers an answer carries when it already has some.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceHeaders {
    /// This role's span's (a node: its span executed or replayed the request).
    Ours,
    /// The upstream's, when it set them (a router forwarding a node's answer,
    /// same trace, the node's span); ours otherwise.
    KeepUpstream,
}

/// The state of [`observe`]: what to call and which trace headers win.
#[derive(Clone)]
#[allow(missing_debug_implementations)] // holds a trait object; nothing to show
pub struct Observe {
    pub observer: Arc<dyn Observer>,
    pub trace_headers: TraceHeaders,
}

impl Observe {
    pub fn new(observer: impl Observer, trace_headers: TraceHeaders) -> Self {
        Self {
            observer: Arc::new(observer),
            trace_headers,
        }
    }
}

/// The middleware (install with `axum::middleware::from_fn_with_state`).
pub async fn observe(State(observe): State<Observe>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    // Fields recorded later by handlers must be declared here.
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
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("otel.status_code", "ERROR");
    }
    if let Some(InternalCause(cause)) = response.extensions().get::<InternalCause>() {
        span.in_scope(|| error!(error = %format!("{cause:#}"), status, "request failed"));
    }
    observe.observer.finished(
        &Finished {
            method: &method,
            route: &route,
            elapsed: started.elapsed(),
            span: &span,
        },
        &response,
    );
    // A node answers with its own ids even without a tracer (they still
    // correlate logs); a router adds its own only when they mean something.
    if observe.trace_headers == TraceHeaders::Ours || span_context.is_valid() {
        let headers = response.headers_mut();
        let ours = [
            (X_TRACE_ID, HeaderValue::try_from(trace.trace_id())),
            (
                TRACERESPONSE,
                HeaderValue::try_from(trace.traceparent.as_str()),
            ),
        ];
        for (name, value) in ours {
            let Ok(value) = value else { continue };
            match observe.trace_headers {
                TraceHeaders::Ours => {
                    headers.insert(name, value);
                }
                TraceHeaders::KeepUpstream => {
                    headers.entry(name).or_insert(value);
                }
            }
        }
    }
    response
}

/// The answers and the outermost layer every listener's router shares: the
/// API's `404 NOT_FOUND` and `405 METHOD_NOT_ALLOWED` (axum's own have no
/// body), then [`observe`] around everything.
pub fn outermost<S>(router: axum::Router<S>, observing: Observe) -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    router
        .fallback(|| async { crate::ApiError::NotFound })
        .method_not_allowed_fallback(|| async { crate::ApiError::MethodNotAllowed })
        .layer(axum::middleware::from_fn_with_state(observing, observe))
}
