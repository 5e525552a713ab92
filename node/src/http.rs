//! The node's part of observing a request: on top of the edge's server span
//! and trace headers ([`once_edge::observe`]), the latency histogram by
//! route, status and idempotency outcome, and the outcome on the span.

use axum::response::Response;
use once_edge::observe::{Finished, Observer};

pub use once_edge::observe::TraceContext;

use crate::metrics::{Outcome, RequestLabels};
use crate::state::AppState;

/// Records each finished request in the node's metrics.
#[derive(Debug, Clone)]
pub struct RequestMetrics(pub AppState);

impl Observer for RequestMetrics {
    fn finished(&self, request: &Finished<'_>, response: &Response) {
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
        request.span.record("idempotency.outcome", outcome.as_str());
        let elapsed = request.elapsed.as_secs_f64();
        let metrics = &self.0.metrics;
        if let Some(histogram) = metrics.otel_request_duration.get() {
            histogram.record(
                elapsed,
                &[
                    opentelemetry::KeyValue::new("http.request.method", request.method.to_owned()),
                    opentelemetry::KeyValue::new("http.route", request.route.to_owned()),
                    opentelemetry::KeyValue::new("http.response.status_code", i64::from(status)),
                    opentelemetry::KeyValue::new("idempotency.outcome", outcome.as_str()),
                ],
            );
        }
        metrics
            .request_duration
            .get_or_create(&RequestLabels {
                method: request.method.to_owned(),
                route: request.route.to_owned(),
                status,
                outcome: outcome.as_str().to_owned(),
            })
            .observe(elapsed);
    }
}
