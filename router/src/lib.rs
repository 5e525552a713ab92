//! The `once` router: the region's public entry point. It authenticates a
//! request with the node's API keys, finds the tenant's home region in
//! raft-store's placement table and forwards the request to a node of that
//! region (DESIGN §6). It health-checks every region's nodes and, when a
//! region goes down, moves its tenants to their standbys by compare-and-set
//! on the placement epoch, so several routers can decide at once safely.
//!
//! # Layout
//!
//! - [`app`]: build (store clients, HTTP clients, bind) and run (serve,
//!   placement refresher, health checker, drain) on two runtimes: the
//!   process's for forwards, a control thread for the admin listener and
//!   the control loops.
//! - [`config`]: validated configuration; [`nodes`]: `--nodes`, the node
//!   URLs of each region and their round-robin rotation.
//! - [`state`]: what handlers and background tasks share.
//! - [`forward`]: `/payments…` — resolve, forward, 421 retry, 503.
//! - [`headers`]: end-to-end headers pass, hop-by-hop ones stop.
//! - [`placement`]: the placement cache and its refresher.
//! - [`regions`]: this router's up/down view of each region (thresholds,
//!   and the evidence a region is declared down on).
//! - [`store_view`]: raft-store's members' word of each other, which
//!   corroborates failed health checks.
//! - [`health`]: the health-check loop and automatic failover.
//! - [`failover`]: moving tenants — failover and failback by epoch CAS.
//! - [`admin`]: operator failover, failback, the placement table and the
//!   simulated partition switch.
//! - [`console`]: the operator console at `/console` (admin listener):
//!   regions in the failover state machine with the failback action, store
//!   members, tenants, stuck records with the resolve action, failover and
//!   chaos drill reports.
//! - [`audit`]: the console's failback audit trail (who, why, outcome).
//! - [`reachability`]: nodes that refused a connection lately, skipped
//!   (fail fast) until a probe or a health check reaches them again.
//! - [`partition`]: regions a drill has cut off from this router (their
//!   nodes count as unreachable for forwarding and health checks).
//! - [`ops`], [`metrics`]: health/readiness/metrics endpoints, Prometheus
//!   counters. Everything else at the HTTP edge (the server and its limits,
//!   API keys, per-tenant gates, path checks, spans and trace ids, errors)
//!   is the `once-edge` crate's, shared with the node.
//!
//! # A request, and a region failing
//!
//! ```text
//! client ─► router ─ edge (limits, path check 400) ─ Bearer key → tenant (401) ─ tenant gate (429)
//!                  ─ placement cache → home ─► node(home)
//!                                                                   │
//!             ◄── answer streamed back + X-Once-Region ─────────────┤
//!             421 (node is not home) ─► re-read placement ─► resend once to the new home
//!             no answer ─► 503 SERVICE_UNAVAILABLE, Retry-After: 1
//!             every node refused a connection lately ─► 503 at once, Retry-After: the backoff left
//!
//! health checker ── GET /readyz every interval ──► every node of every region
//!   N rounds all failed, on sure evidence (all refused, cut off, raft-store lost the
//!   region's member; or failing for 2 s) ─► store: region Down ─► for each tenant homed there:
//!     set_placement(tenant, epoch, first healthy standby, …) ── CAS: one router wins
//! ```
//!
//! A drill's simulated partition (`POST /admin/partition`) makes a region's
//! nodes count as unreachable in both places above: forwards answer 503
//! with nothing sent, health checks fail, failover follows.
//!
//! The router never decides anything about a payment: the node does, and
//! fences by placement. A router with a stale cache costs a 421 and a
//! retry; two routers disagreeing about a region cost at most one epoch
//! bump per tenant, because the store applies one CAS per epoch.

pub mod admin;
pub mod app;
pub mod audit;
pub mod config;
pub mod console;
pub mod failover;
pub mod forward;
pub mod headers;
pub mod health;
pub mod metrics;
pub mod nodes;
pub mod ops;
pub mod partition;
pub mod placement;
pub mod reachability;
pub mod regions;
pub mod state;
pub mod store_view;

pub use app::RouterApp;
pub use config::{HealthConfig, RouterConfig};
pub use nodes::NodeDirectory;
pub use reachability::FailFast;
