//! The settings of webhook delivery. Defaults are the production schedule
//! (decision 0091); tests shorten it through the node's flags.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// The wait before the second attempt; doubles after each failure.
    pub retry_base: Duration,
    /// The longest wait between two attempts.
    pub retry_cap: Duration,
    /// How long a delivery is retried, counted from its first due time,
    /// before it is dead-lettered.
    pub retry_budget: Duration,
    /// A merchant's endpoint must answer within this, or the attempt failed.
    pub attempt_timeout: Duration,
    /// Attempts in flight on this node, all endpoints together.
    pub concurrency: usize,
    /// Attempts in flight to one endpoint: a hanging endpoint holds at most
    /// this many of [`WebhookConfig::concurrency`].
    pub per_endpoint: usize,
    /// How often the dispatcher looks for work when idle.
    pub poll_interval: Duration,
    /// How long the old secret keeps signing beside the new one after a
    /// rotation.
    pub rotation_overlap: Duration,
    /// Deliver to loopback, private and link-local addresses too
    /// (`crate::webhooks::targets`): a development cluster whose receivers
    /// run beside it. Off in production: a tenant's URL must not reach
    /// into the cluster's own network.
    pub allow_private_targets: bool,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            retry_base: Duration::from_secs(10),
            retry_cap: Duration::from_secs(3600),
            retry_budget: Duration::from_secs(3 * 24 * 3600),
            attempt_timeout: Duration::from_secs(10),
            concurrency: 64,
            per_endpoint: 8,
            poll_interval: Duration::from_millis(100),
            rotation_overlap: Duration::from_secs(24 * 3600),
            allow_private_targets: false,
        }
    }
}

impl WebhookConfig {
    /// A delivery's claim lasts past its attempt's timeout, so a node that
    /// is still waiting on the merchant keeps it; one that died frees it.
    pub fn lease(&self) -> Duration {
        self.attempt_timeout * 3
    }

    /// Connections of the dispatcher's own pool (PostgreSQL).
    pub fn pool_size(&self) -> u32 {
        4
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.retry_base.is_zero() && self.retry_base <= self.retry_cap,
            "webhook retry base must be positive and at most the cap"
        );
        anyhow::ensure!(
            self.retry_budget >= self.retry_cap,
            "webhook retry budget must be at least the cap"
        );
        anyhow::ensure!(
            !self.attempt_timeout.is_zero(),
            "webhook attempt timeout must be positive"
        );
        anyhow::ensure!(
            self.concurrency >= 1 && self.per_endpoint >= 1,
            "webhook concurrency must be at least 1"
        );
        Ok(())
    }
}
