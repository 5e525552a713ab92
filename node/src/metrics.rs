//! The node's metrics (DESIGN §8), one registry per node instance so that
//! several nodes in one test process never share counters.
//!
//! DESIGN names use dots (`idempotency.replay.count`); Prometheus names use
//! underscores, and counters get the `_total` suffix
//! (`idempotency_replay_count_total`).
//!
//! The registry here is the source of truth. When OTLP export is configured
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`), [`Metrics::export_over_otlp`] registers
//! OpenTelemetry observable instruments that read the same counters and
//! gauges under their DESIGN names, and the request histogram is recorded
//! into an OpenTelemetry histogram as well. Without an endpoint the global
//! meter is a no-op and costs nothing.
//!
//! The event path's metrics ([`EventMetrics`]) are defined by `once-events`
//! and registered here, in the same registry.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use crate::events::metrics::EventMetrics;

use crate::error::ErrorCode;

/// How a request ended, from the idempotency contract's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Executed,
    Replayed,
    Conflict,
    InProgress,
    Recovered,
    Rejected,
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Executed => "executed",
            Self::Replayed => "replayed",
            Self::Conflict => "conflict",
            Self::InProgress => "in_progress",
            Self::Recovered => "recovered",
            Self::Rejected => "rejected",
            Self::Error => "error",
        }
    }
}

impl Outcome {
    /// The outcome of an error answer.
    pub fn of_error(code: ErrorCode) -> Self {
        match code {
            ErrorCode::IdempotencyKeyReusedWithDifferentRequest => Self::Conflict,
            ErrorCode::IdempotencyRequestInProgress => Self::InProgress,
            ErrorCode::ServiceUnavailable | ErrorCode::InternalError => Self::Error,
            _ => Self::Rejected,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: String,
    pub route: String,
    pub status: u16,
    pub outcome: String,
}

/// How a finish written after its answer ended (decision 0054): `written`,
/// `taken_over` (another owner took the record over first) or `failed`
/// (left for recovery after the lease).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct FinishLabels {
    pub result: String,
}

pub struct Metrics {
    registry: Registry,
    pub replays: Counter,
    pub conflicts_different_request: Counter,
    pub expired_retries: Counter,
    pub takeovers: Counter,
    pub unknown_state: Counter,
    pub in_progress_age_max: Gauge<f64, AtomicU64>,
    pub unknown_records: Gauge,
    /// Seconds since the shared store's leader was last heard, as this
    /// node last had word of it (raft mode, decision 0059); NaN without.
    pub shared_store_leader_heard: Gauge<f64, AtomicU64>,
    pub expired_records: Counter,
    pub purged_records: Counter,
    /// Records still sealed under a key older than the newest: 0 means
    /// every older key may be removed from the key file (decision 0031).
    pub sealed_stale_records: Gauge,
    /// Records re-sealed under the newest key after a rotation.
    pub resealed_records: Counter,
    /// Payment rows the settling pass wrote after their record finished
    /// (raft mode, decision 0053): each one a finish cut short.
    pub settled_late: Counter,
    /// Finishes written after their answer, by how they ended.
    pub finishes_after_answer: Family<FinishLabels, Counter>,
    pub request_duration: Family<RequestLabels, Histogram>,
    /// The event path: outbox publisher, consumers, email sender.
    pub events: EventMetrics,
    /// The HTTP edge: connections, shedding, deadlines, tenant admission.
    pub edge: once_edge::EdgeMetrics,
    /// The OpenTelemetry twin of `request_duration`, set only when exporting.
    pub otel_request_duration: std::sync::OnceLock<opentelemetry::metrics::Histogram<f64>>,
    /// Observable instruments stay registered while these live.
    otel_observers: std::sync::Mutex<Vec<Box<dyn std::any::Any + Send + Sync>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let replays = Counter::default();
        let conflicts_different_request = Counter::default();
        let expired_retries = Counter::default();
        let takeovers = Counter::default();
        let unknown_state = Counter::default();
        let in_progress_age_max = Gauge::<f64, AtomicU64>::default();
        let unknown_records = Gauge::default();
        let shared_store_leader_heard = Gauge::<f64, AtomicU64>::default();
        shared_store_leader_heard.set(f64::NAN);
        let expired_records = Counter::default();
        let purged_records = Counter::default();
        let sealed_stale_records = Gauge::default();
        let resealed_records = Counter::default();
        let settled_late = Counter::default();
        let finishes_after_answer = Family::<FinishLabels, Counter>::default();
        let request_duration = Family::<RequestLabels, Histogram>::new_with_constructor(|| {
            // 0.5 ms … ~4 s: local claims to cross-region writes.
            Histogram::new(exponential_buckets(0.0005, 2.0, 14))
        });
        registry.register(
            "idempotency_replay_count",
            "Completed operations replayed",
            replays.clone(),
        );
        registry.register(
            "idempotency_conflict_different_request_count",
            "Keys reused with a different request (409)",
            conflicts_different_request.clone(),
        );
        registry.register(
            "idempotency_expired_retry_count",
            "Retries that arrived after the replay window",
            expired_retries.clone(),
        );
        registry.register(
            "idempotency_takeover_count",
            "Fenced takeovers of records whose lease expired",
            takeovers.clone(),
        );
        registry.register(
            "idempotency_unknown_state_count",
            "Operations whose provider outcome became unknown",
            unknown_state.clone(),
        );
        registry.register(
            "idempotency_in_progress_age_max_seconds",
            "Age of the oldest unfinished idempotency record",
            in_progress_age_max.clone(),
        );
        registry.register(
            "idempotency_unknown_state_records",
            "Records waiting in UNKNOWN_REQUIRES_RECOVERY",
            unknown_records.clone(),
        );
        registry.register(
            "shared_store_leader_heard_seconds",
            "Since raft-store's leader was last heard, as the nearest store member last told this node, aged since (raft mode; NaN when it knows no leader, or in sql mode)",
            shared_store_leader_heard.clone(),
        );
        registry.register(
            "idempotency_expired_records",
            "Records whose stored answer was purged at expiry",
            expired_records.clone(),
        );
        registry.register(
            "idempotency_purged_records",
            "Expired records deleted after their retention",
            purged_records.clone(),
        );
        registry.register(
            "idempotency_sealed_stale_records",
            "Records still sealed under a data key older than the newest (0: older keys may be retired)",
            sealed_stale_records.clone(),
        );
        registry.register(
            "idempotency_resealed_records",
            "Records re-sealed under the newest data key after a rotation",
            resealed_records.clone(),
        );
        registry.register(
            "payments_settled_late_count",
            "Payment rows settled after their record finished, by the recovery worker's settling pass",
            settled_late.clone(),
        );
        registry.register(
            "payments_finishes_after_answer",
            "Finishes written after their payment was answered (raft mode), by result: written, taken_over, failed",
            finishes_after_answer.clone(),
        );
        registry.register(
            "http_server_request_duration_seconds",
            "Request latency by route and outcome",
            request_duration.clone(),
        );
        let events = EventMetrics::register(&mut registry);
        let edge = once_edge::EdgeMetrics::default();
        edge.register(&mut registry);
        Self {
            registry,
            events,
            edge,
            replays,
            conflicts_different_request,
            expired_retries,
            takeovers,
            unknown_state,
            in_progress_age_max,
            unknown_records,
            shared_store_leader_heard,
            expired_records,
            purged_records,
            sealed_stale_records,
            resealed_records,
            settled_late,
            finishes_after_answer,
            request_duration,
            otel_request_duration: std::sync::OnceLock::new(),
            otel_observers: std::sync::Mutex::default(),
        }
    }

    /// Publishes the counters and gauges through the global OpenTelemetry
    /// meter, under the names DESIGN §8 uses.
    pub fn export_over_otlp(&self) {
        if !once_telemetry::exporting() {
            return;
        }
        let meter = opentelemetry::global::meter("once-node");
        let _ = self.otel_request_duration.set(
            meter
                .f64_histogram("http.server.request.duration")
                .with_unit("s")
                .with_description("Request latency by route and outcome")
                .build(),
        );
        let mut observers = self
            .otel_observers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let counters: [(&'static str, &Counter); 7] = [
            ("idempotency.replay.count", &self.replays),
            (
                "idempotency.conflict.different_request.count",
                &self.conflicts_different_request,
            ),
            ("idempotency.expired_retry.count", &self.expired_retries),
            ("idempotency.takeover.count", &self.takeovers),
            ("idempotency.unknown_state.count", &self.unknown_state),
            ("idempotency.expired_records.count", &self.expired_records),
            ("idempotency.purged_records.count", &self.purged_records),
        ];
        for (name, counter) in counters {
            let counter = counter.clone();
            observers.push(Box::new(
                meter
                    .u64_observable_counter(name)
                    .with_callback(move |o| o.observe(counter.get(), &[]))
                    .build(),
            ));
        }
        let age = self.in_progress_age_max.clone();
        observers.push(Box::new(
            meter
                .f64_observable_gauge("idempotency.in_progress.age.max")
                .with_unit("s")
                .with_callback(move |o| o.observe(age.get(), &[]))
                .build(),
        ));
        let unknown = self.unknown_records.clone();
        observers.push(Box::new(
            meter
                .i64_observable_gauge("idempotency.unknown_state.records")
                .with_callback(move |o| o.observe(unknown.get(), &[]))
                .build(),
        ));
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}
