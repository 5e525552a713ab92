//! Shared state of a running node, handed to every handler and worker.

use std::ops::Deref;
use std::sync::Arc;

use crate::auth::ApiKeys;
use crate::config::NodeConfig;
use crate::domain::Clock;
use crate::idempotency::ReplayCache;
use crate::metrics::Metrics;
use crate::provider::PaymentProvider;
use crate::store::Stores;

/// Cheap to clone: one `Arc` around [`App`].
#[derive(Debug, Clone)]
pub struct AppState(pub Arc<App>);

impl Deref for AppState {
    type Target = App;
    fn deref(&self) -> &App {
        &self.0
    }
}

#[derive(Debug)]
pub struct App {
    /// Validated at startup; never changes while the node runs.
    pub config: NodeConfig,
    /// Digests of the accepted API keys (shared with the authenticating layer).
    pub api_keys: Arc<ApiKeys>,
    /// Where idempotency records and payments live, one trait per caller.
    pub store: Stores,
    pub provider: Arc<dyn PaymentProvider>,
    /// Finished records by scope: replays without a database round trip.
    pub replays: ReplayCache,
    /// The clock leases and replay windows are judged by.
    pub clock: Arc<dyn Clock>,
    /// This node's own registry; `/metrics` renders it.
    pub metrics: Metrics,
    /// The data keys the stores seal with; the re-encryption worker
    /// reloads them when the key file changes.
    pub data_keys: Arc<crate::data_keys::DataKeys>,
    /// Finishes written after their answer went out
    /// ([`NodeConfig::answer_before_finish`]); shutdown waits for them.
    pub finishing: crate::finishing::Finishing,
    /// Webhook endpoints and delivery (`crate::webhooks`).
    pub webhooks: crate::webhooks::Webhooks,
}
