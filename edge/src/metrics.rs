//! The edge's own metrics, registered into each role's registry so they
//! come out of that role's `/metrics` (prometheus-client handles are
//! shared: registering a clone exports the same counters).
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `edge_connections_open` | `listener` | connections now open |
//! | `edge_connections_refused_total` | `listener` | accepted and closed at once: the connection cap was reached |
//! | `edge_connections_closed_total` | `listener`, `reason` | closed by the server: `header_timeout`, `idle_timeout` |
//! | `edge_requests_shed_total` | `listener` | answered `503 SERVICE_OVERLOADED`: the in-flight limit was reached |
//! | `edge_request_deadline_exceeded_total` | `listener` | answered `503`: the whole-request deadline passed |
//! | `edge_panics_total` | `listener` | handlers that panicked (answered `500`) |
//! | `edge_tenant_requests_total` | `tenant`, `outcome` | `admitted`, `rate_limited`, `over_quota` |
//! | `edge_tenant_in_flight` | `tenant` | the tenant's requests now in flight |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ListenerLabel {
    pub listener: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReasonLabels {
    pub listener: String,
    pub reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TenantOutcome {
    pub tenant: String,
    pub outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TenantLabel {
    pub tenant: String,
}

/// Cheap to clone: every field is a shared handle.
#[derive(Debug, Clone, Default)]
pub struct EdgeMetrics {
    pub connections_open: Family<ListenerLabel, Gauge>,
    pub connections_refused: Family<ReasonLabels, Counter>,
    pub connections_closed: Family<ReasonLabels, Counter>,
    pub requests_shed: Family<ReasonLabels, Counter>,
    pub deadline_exceeded: Family<ListenerLabel, Counter>,
    pub panics: Family<ListenerLabel, Counter>,
    pub tenant_requests: Family<TenantOutcome, Counter>,
    pub tenant_in_flight: Family<TenantLabel, Gauge>,
}

impl EdgeMetrics {
    /// Adds every edge metric to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "edge_connections_open",
            "Connections now open, by listener",
            self.connections_open.clone(),
        );
        registry.register(
            "edge_connections_refused",
            "Connections closed on accept: the listener's connection cap or the peer's share of it was reached",
            self.connections_refused.clone(),
        );
        registry.register(
            "edge_connections_closed",
            "Connections the server closed: header read or idle timeout, idle while near the cap, TLS handshake",
            self.connections_closed.clone(),
        );
        registry.register(
            "edge_requests_shed",
            "Requests answered 503 SERVICE_OVERLOADED at the listener's in-flight limit or the peer's share of it",
            self.requests_shed.clone(),
        );
        registry.register(
            "edge_request_deadline_exceeded",
            "Requests answered 503 when the whole-request deadline passed",
            self.deadline_exceeded.clone(),
        );
        registry.register(
            "edge_panics",
            "Handlers that panicked and were answered 500",
            self.panics.clone(),
        );
        registry.register(
            "edge_tenant_requests",
            "Tenant requests by admission outcome: admitted, rate_limited, over_quota",
            self.tenant_requests.clone(),
        );
        registry.register(
            "edge_tenant_in_flight",
            "Requests of each tenant now in flight",
            self.tenant_in_flight.clone(),
        );
    }

    pub(crate) fn listener(name: &str) -> ListenerLabel {
        ListenerLabel {
            listener: name.to_owned(),
        }
    }
}
