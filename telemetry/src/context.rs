//! W3C trace context across process boundaries.

use http::HeaderMap;
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::try_from(key),
            http::HeaderValue::try_from(value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// The remote parent named by incoming `traceparent`/`tracestate`, if any.
pub fn extract(headers: &HeaderMap) -> Context {
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)))
}

/// Makes `span` a child of the caller's span when the request named one.
pub fn set_remote_parent(span: &tracing::Span, headers: &HeaderMap) {
    let parent = extract(headers);
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// Writes the current span's context into outgoing headers.
pub fn inject_current(headers: &mut HeaderMap) {
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&context, &mut HeaderInjector(headers))
    });
}

/// The OpenTelemetry span context of a `tracing` span.
pub fn span_context(span: &tracing::Span) -> SpanContext {
    span.context().span().span_context().clone()
}

/// `00-<trace id>-<span id>-<flags>`, the W3C `traceparent` of a span.
pub fn traceparent(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

/// The `traceparent` of the current span, if it has a valid context.
pub fn current_traceparent() -> Option<String> {
    let context = span_context(&tracing::Span::current());
    context.is_valid().then(|| traceparent(&context))
}

/// Parses a stored `traceparent` back into a (remote) span context, so a
/// later span can link to it.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || parts.next().is_some() {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

/// The 32-hex trace id inside a stored `traceparent` (or a bare trace id).
pub fn trace_id_of(stored: &str) -> &str {
    stored.split('-').nth(1).unwrap_or(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_round_trip() {
        let s = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parse_traceparent(s).unwrap();
        assert_eq!(traceparent(&context), s);
        assert_eq!(trace_id_of(s), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            trace_id_of("4bf92f3577b34da6a3ce929d0e0e4736"),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(
            parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none()
        );
        assert!(parse_traceparent("garbage").is_none());
    }
}
