//! The event path's metrics (DESIGN §8): outbox backlog and publish lag,
//! consumer outcomes and lag, email sends. The event path owns them; the
//! node's registry registers them ([`EventMetrics::register`]) beside its
//! own, so they appear on the node's `/metrics`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ConsumerLabels {
    pub consumer: String,
    /// `processed`, `duplicate`, `ignored`, `retried`, `dead_lettered`,
    /// `redriven`.
    pub outcome: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ConsumerName {
    pub consumer: String,
}

/// Metrics of the event path. Cloning shares the values, so each worker
/// holds its own handle.
#[derive(Debug, Clone)]
pub struct EventMetrics {
    /// Outbox rows not yet published (sampled by the publisher).
    pub outbox_backlog: Gauge,
    /// Age of the oldest unpublished outbox row.
    pub outbox_oldest_age: Gauge<f64, AtomicU64>,
    /// From the payment's commit (outbox `created_at`) to the broker's ack.
    pub publish_lag: Histogram,
    pub published: Counter,
    pub publish_failures: Counter,
    pub consumed: Family<ConsumerLabels, Counter>,
    /// From the payment's commit to the consumer's effect commit.
    pub consume_lag: Family<ConsumerName, Histogram>,
    pub emails_sent: Counter,
    pub email_send_failures: Counter,
}

fn lag_buckets() -> Histogram {
    // 1 ms … 60 s, finest where the event path's objective sits (a p99 of
    // 100 ms at full rate), so a p99 reads as 75 or 150 ms, not "≤ 256".
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5,
        5.0, 10.0, 30.0, 60.0,
    ])
}

impl EventMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::unregistered();
        registry.register(
            "outbox_backlog",
            "Outbox rows not yet published",
            metrics.outbox_backlog.clone(),
        );
        registry.register(
            "outbox_oldest_unpublished_age_seconds",
            "Age of the oldest unpublished outbox row",
            metrics.outbox_oldest_age.clone(),
        );
        registry.register(
            "outbox_publish_lag_seconds",
            "From the payment's commit to the broker storing its event",
            metrics.publish_lag.clone(),
        );
        registry.register(
            "outbox_published",
            "Events published from the outbox",
            metrics.published.clone(),
        );
        registry.register(
            "outbox_publish_failures",
            "Publish rounds that failed and will be retried",
            metrics.publish_failures.clone(),
        );
        registry.register(
            "events_consumed",
            "Deliveries settled by consumers, by outcome",
            metrics.consumed.clone(),
        );
        registry.register(
            "events_consume_lag_seconds",
            "From the payment's commit to the consumer's effect",
            metrics.consume_lag.clone(),
        );
        registry.register(
            "email_sent",
            "Receipt emails accepted by the email sender",
            metrics.emails_sent.clone(),
        );
        registry.register(
            "email_send_failures",
            "Email sends that failed and will be retried",
            metrics.email_send_failures.clone(),
        );
        metrics
    }

    /// Values without a registry (library tests, tools).
    pub fn unregistered() -> Self {
        Self {
            outbox_backlog: Gauge::default(),
            outbox_oldest_age: Gauge::default(),
            publish_lag: lag_buckets(),
            published: Counter::default(),
            publish_failures: Counter::default(),
            consumed: Family::default(),
            consume_lag: Family::new_with_constructor(lag_buckets),
            emails_sent: Counter::default(),
            email_send_failures: Counter::default(),
        }
    }

    pub fn consumed(&self, consumer: &str, outcome: &str) {
        self.consumed
            .get_or_create(&ConsumerLabels {
                consumer: consumer.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    pub fn consumed_count(&self, consumer: &str, outcome: &str) -> u64 {
        self.consumed
            .get_or_create(&ConsumerLabels {
                consumer: consumer.to_owned(),
                outcome: outcome.to_owned(),
            })
            .get()
    }
}
