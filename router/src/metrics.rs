//! The router's Prometheus metrics, one registry per router instance (so
//! several routers in one test process never share counters).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use axum::http::StatusCode;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ForwardLabels {
    /// The region that served (or was meant to serve) the request.
    pub region: String,
    pub status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RegionLabels {
    pub region: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DownLabels {
    pub region: String,
    /// What it was declared down on ([`crate::regions::Evidence::as_str`]).
    pub evidence: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct MoveLabels {
    pub from: String,
    pub to: String,
    /// `automatic`, `command` (operator failover) or `failback`.
    pub trigger: String,
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// `router_requests_total{region,status}`: answers to `/payments…`
    /// (`region` empty when the router answered alone: 401, 413).
    pub requests: Family<ForwardLabels, Counter>,
    /// `router_request_duration_seconds{region,status}`: from the request
    /// to the start of its answer, forwarding (and a 421 re-send) included.
    pub request_duration: Family<ForwardLabels, Histogram>,
    /// `router_misdirected_total`: 421s received from nodes.
    pub misdirected: Counter,
    /// `router_node_unreachable_total{region}`: forwards that got no answer.
    pub unreachable: Family<RegionLabels, Counter>,
    /// `router_failed_fast_total{region}`: `503`s answered without dialling,
    /// every node of the region having refused a connection lately
    /// ([`crate::reachability`]).
    pub failed_fast: Family<RegionLabels, Counter>,
    /// `router_placement_moves_total{from,to,trigger}`: tenants this router moved.
    pub placement_moves: Family<MoveLabels, Counter>,
    /// `router_region_failovers_total{region}`: regions this router declared down.
    pub region_failovers: Family<RegionLabels, Counter>,
    /// `router_region_down_declarations_total{region,evidence}`: the same
    /// declarations by what they were made on (decision 0085): what a
    /// loaded run counts for regions that were never stopped.
    pub region_down_declarations: Family<DownLabels, Counter>,
    /// `router_region_down_withheld_total{region}`: failing streaks that
    /// reached the threshold with nothing saying the region is gone, not
    /// declared (once per streak).
    pub region_down_withheld: Family<RegionLabels, Counter>,
    /// `router_region_healthy{region}`: 1 while this router sees the region up.
    pub region_healthy: Family<RegionLabels, Gauge>,
    /// `router_region_consecutive_failures{region}`.
    pub region_failures: Family<RegionLabels, Gauge>,
    /// `router_placements`: tenants in the placement cache.
    pub placements: Gauge<i64, std::sync::atomic::AtomicI64>,
    /// `router_placement_refresh_failures_total`.
    pub refresh_failures: Counter<u64, AtomicU64>,
    /// The HTTP edge's own: connections, shedding, deadlines, tenant admission.
    pub edge: once_edge::EdgeMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<ForwardLabels, Counter>::default();
        registry.register(
            "router_requests",
            "Answers to /payments requests, by serving region and status",
            requests.clone(),
        );
        let request_duration = Family::<ForwardLabels, Histogram>::new_with_constructor(|| {
            // 0.5 ms .. ~8 s: local hops up to cross-region failover retries.
            Histogram::new(exponential_buckets(0.0005, 2.0, 15))
        });
        registry.register(
            "router_request_duration_seconds",
            "Time from a /payments request to the start of its answer, by serving region and status",
            request_duration.clone(),
        );
        let misdirected = Counter::default();
        registry.register(
            "router_misdirected",
            "421 Misdirected Request answers received from nodes",
            misdirected.clone(),
        );
        let unreachable = Family::<RegionLabels, Counter>::default();
        registry.register(
            "router_node_unreachable",
            "Forwards that got no answer from the region's nodes",
            unreachable.clone(),
        );
        let failed_fast = Family::<RegionLabels, Counter>::default();
        registry.register(
            "router_failed_fast",
            "503s answered without dialling: every node of the region refused a connection lately",
            failed_fast.clone(),
        );
        let placement_moves = Family::<MoveLabels, Counter>::default();
        registry.register(
            "router_placement_moves",
            "Tenant placements this router moved (failover, failback)",
            placement_moves.clone(),
        );
        let region_failovers = Family::<RegionLabels, Counter>::default();
        registry.register(
            "router_region_failovers",
            "Regions this router declared down after failed health checks",
            region_failovers.clone(),
        );
        let region_down_declarations = Family::<DownLabels, Counter>::default();
        registry.register(
            "router_region_down_declarations",
            "Regions this router declared down, by the evidence it did so on",
            region_down_declarations.clone(),
        );
        let region_down_withheld = Family::<RegionLabels, Counter>::default();
        registry.register(
            "router_region_down_withheld",
            "Failing streaks that reached the threshold with nothing saying the region is gone: not declared down",
            region_down_withheld.clone(),
        );
        let region_healthy = Family::<RegionLabels, Gauge>::default();
        registry.register(
            "router_region_healthy",
            "1 while this router's health checks see the region up",
            region_healthy.clone(),
        );
        let region_failures = Family::<RegionLabels, Gauge>::default();
        registry.register(
            "router_region_consecutive_failures",
            "Consecutive failed health-check rounds of the region",
            region_failures.clone(),
        );
        let placements = Gauge::default();
        registry.register(
            "router_placements",
            "Tenants in the placement cache",
            placements.clone(),
        );
        let refresh_failures = Counter::default();
        registry.register(
            "router_placement_refresh_failures",
            "Placement refreshes that could not read raft-store",
            refresh_failures.clone(),
        );
        let edge = once_edge::EdgeMetrics::default();
        edge.register(&mut registry);
        Self {
            edge,
            registry,
            requests,
            request_duration,
            misdirected,
            unreachable,
            failed_fast,
            placement_moves,
            region_failovers,
            region_down_declarations,
            region_down_withheld,
            region_healthy,
            region_failures,
            placements,
            refresh_failures,
        }
    }

    /// Counts one answer and how long it took.
    pub fn observe_request(&self, region: &str, status: StatusCode, took: Duration) {
        let labels = ForwardLabels {
            region: region.to_owned(),
            status: status.as_u16(),
        };
        self.requests.get_or_create(&labels).inc();
        self.request_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn region(region: &str) -> RegionLabels {
        RegionLabels {
            region: region.to_owned(),
        }
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}
