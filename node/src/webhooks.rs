//! Webhooks (DESIGN §11; decisions 0091 and 0092): a tenant's endpoints,
//! and every outbox event delivered to each endpoint that asked for its
//! type, at least once, signed, under a stable event id.
//!
//! ```text
//!  outbox ─► publisher ─► broker ─► `webhooks` consumer ─► webhook_events ─► fan-out ─► webhook_deliveries ─► attempt ─► merchant
//!                                   (once_events)          (one per event)   (dispatcher) (one per event×endpoint)  (signed POST)
//! ```
//!
//! # Layout
//!
//! - [`WebhookConfig`] (in `crate::config`): the delivery schedule, timeouts and budgets.
//! - [`signature`]: `Once-Signature` (HMAC-SHA256 over `t.body`).
//! - [`targets`]: which addresses a delivery may reach (no SSRF into the
//!   cluster's network).
//! - [`schedule`]: capped exponential backoff with jitter, and the budget.
//! - [`endpoints`]: the `webhook_endpoints` table and the sealed secrets.
//! - [`deliveries`]: the `webhook_deliveries` table: fan-out, claims
//!   with leases, outcomes, dead letters and redrives.
//! - [`retention`]: 30 days of events, then what owes nothing is pruned.
//! - [`dispatcher`]: the node's delivery task (and the pruning).
//! - `crate::webhook_routes`: `/webhook-endpoints` and `GET /events` (beside
//!   the state they read, so this module does not import it back).
//!
//! Delivery runs on its own pool (PostgreSQL) and its own bounded set of
//! in-flight attempts, each with a timeout, so a merchant whose endpoint
//! hangs or fails costs only its own retries; payments never wait on it.

pub mod deliveries;
pub mod dispatcher;
pub mod endpoints;
pub mod retention;
pub mod schedule;
pub mod signature;
pub mod targets;

use std::sync::Arc;

use once_db::Database;

pub use crate::config::WebhookConfig;

use crate::data_keys::DataKeys;
use crate::domain::Clock;

/// Why the `raft` store mode answers `501` (decision 0091).
pub const RAFT_MODE: &str = "webhook endpoints are not offered in the raft store mode yet: \
     an endpoint must be readable in every region after a failover, and raft-store holds no webhook state";

/// What the webhook routes and the dispatcher share: the regional
/// database (a pool of its own on PostgreSQL), the data keys that seal the
/// secrets, the clock and the settings.
#[derive(Debug, Clone)]
pub struct Webhooks {
    pub db: Database,
    pub data_keys: Arc<DataKeys>,
    pub clock: Arc<dyn Clock>,
    pub config: WebhookConfig,
    /// Why this node does not offer webhooks (raft mode: decision 0091),
    /// answered as `501 NOT_IMPLEMENTED`; `None` where it does.
    pub unavailable: Option<&'static str>,
}
