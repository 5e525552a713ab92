//! The router's validated configuration.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use once_edge::{AdminToken, ServerLimits, TenantLimits};

use crate::nodes::NodeDirectory;
use crate::reachability::FailFast;

/// A configuration the router refuses to start with.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--store-endpoints must name at least one raft-store member")]
    NoStoreEndpoints,
    #[error("--region {0:?} has no nodes in --nodes")]
    OwnRegionWithoutNodes(String),
    #[error("--health-check-failures and --health-check-successes must be at least 1")]
    ZeroThreshold,
    #[error("--health-check-interval and --placement-refresh must be positive")]
    ZeroInterval,
    #[error("--body-limit must be at least 1 byte")]
    ZeroBodyLimit,
    #[error(transparent)]
    Limits(#[from] once_edge::limits::LimitsError),
    #[error(
        "--node-timeout ({node:?}) must be shorter than --request-deadline ({deadline:?}), so a node's late answer is a 503 of the router's own and not a cut-off stream"
    )]
    NodeTimeoutPastDeadline { node: Duration, deadline: Duration },
    #[error(
        "node URL {0} is plaintext: a router with a certificate (--tls-*) forwards to nodes over mutual TLS only; give https:// URLs of nodes started with --api-callers routers"
    )]
    PlaintextNode(String),
}

#[derive(Debug)]
pub struct RouterConfig {
    /// The public listener: `/payments…`, health and readiness.
    pub listen: SocketAddr,
    /// The admin listener: `/metrics`, `/admin/*`, health and readiness.
    pub admin_listen: SocketAddr,
    /// What each listener tolerates (timeouts, connection cap, in-flight limit).
    pub limits: ServerLimits,
    /// Each tenant's rate and in-flight quota, enforced before forwarding.
    pub tenant_limits: TenantLimits,
    /// The region this router runs in: tenants without a placement are
    /// served here, and forwarding elsewhere pays `wan_latency`.
    pub region: String,
    pub store_endpoints: Vec<String>,
    /// raft-store's groups besides the directory (empty: one group).
    pub store_groups: Vec<String>,
    /// The router's CA and certificate (a router identity): mutual TLS
    /// to raft-store and to every node, whose URLs must then be `https://`.
    /// `None`: plaintext to both (development).
    pub tls: Option<once_tls::Tls>,
    /// How the public listener speaks: plaintext or TLS with the API's
    /// certificate (`--public-tls-*`).
    pub public_tls: once_edge::PublicTls,
    pub nodes: NodeDirectory,
    pub health: HealthConfig,
    /// How often the whole placement table is re-read (a 421 re-reads the
    /// tenant at once).
    pub placement_refresh: Duration,
    pub auto_failover: bool,
    /// Bearer token of `/admin/*`; `None` disables those endpoints.
    pub admin_token: Option<AdminToken>,
    /// What the console presents to the nodes' admin listeners (reading
    /// and resolving records): the nodes' own admin token, so the router's
    /// (which a browser holds) opens nothing on a node. `None`: the
    /// router's `admin_token`, for a deployment with one token.
    pub node_admin_token: Option<AdminToken>,
    /// Simulated round trip added before forwarding to another region.
    pub wan_latency: Duration,
    /// Largest request body buffered for forwarding (and re-sending after a 421).
    pub body_limit: usize,
    /// Longest wait for a node's answer to a forwarded request.
    pub node_timeout: Duration,
    /// How long a node that refused a connection is skipped
    /// ([`crate::reachability`]).
    pub fail_fast: FailFast,
    pub drain_timeout: Duration,
    /// Each region's node admin listeners (`--node-admins`): where the
    /// console reads stuck records and the audit trail and sends resolve
    /// actions. `None`: the console shows neither.
    pub node_admins: Option<NodeDirectory>,
    /// Where failover drills write their reports (`--drill-reports`), for
    /// the console's list of recent drills.
    pub drill_reports: Option<PathBuf>,
}

/// When a region counts as down, and as back.
#[derive(Debug, Clone, Copy)]
pub struct HealthConfig {
    /// Time between checks; also each check's timeout.
    pub interval: Duration,
    /// Consecutive failed rounds (every node of the region failing) before
    /// the region is down.
    pub failures: u32,
    /// Consecutive good rounds before a down region is healthy again.
    pub successes: u32,
    /// The least time a region must have been up to take tenants in an
    /// automatic failover (the detection window if that is longer): regions
    /// that all failed together (a raft-store election) come back seconds
    /// apart, whatever the interval (`crate::regions`).
    pub settle: Duration,
    /// How long a region's rounds must have failed with no sure evidence —
    /// no refused connection, no answer of the nodes' own, no word from
    /// raft-store that the region's member is gone — before it is down
    /// anyway: a node that takes connections and answers nothing, while
    /// its region's member is heard, is taken for busy until then
    /// (docs/decisions/0085-a-region-is-down-on-evidence-that-survives-load.md).
    pub unconfirmed_after: Duration,
}

impl Default for HealthConfig {
    /// A region is down 400–600 ms after it stops answering (the first
    /// failed round comes within one interval, two more follow), so a
    /// killed region's tenants are served again within a second
    /// (docs/decisions/0036-bulk-placement-moves.md). A region that
    /// answers nothing for less than 3 × 200 ms (a pause, a slow check) is
    /// never declared down. That speed needs sure evidence (decision
    /// 0085): a refused connection, the nodes' own `503`, or raft-store's
    /// word that the region's member is gone; with none, the region is
    /// down after 2 s of failed rounds.
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(200),
            failures: 3,
            successes: 5,
            settle: Duration::from_secs(3),
            unconfirmed_after: Duration::from_secs(2),
        }
    }
}

impl RouterConfig {
    /// Defaults as the command line has them.
    pub fn new(
        listen: SocketAddr,
        region: &str,
        store_endpoints: Vec<String>,
        nodes: NodeDirectory,
    ) -> Self {
        Self {
            listen,
            admin_listen: SocketAddr::new(listen.ip(), 0),
            limits: ServerLimits::default(),
            tenant_limits: TenantLimits::default(),
            region: region.to_owned(),
            store_endpoints,
            store_groups: Vec::new(),
            tls: None,
            public_tls: once_edge::PublicTls::Plain,
            nodes,
            health: HealthConfig::default(),
            placement_refresh: Duration::from_secs(2),
            auto_failover: true,
            admin_token: None,
            node_admin_token: None,
            wan_latency: Duration::ZERO,
            body_limit: 64 * 1024,
            node_timeout: Duration::from_secs(25),
            fail_fast: FailFast::default(),
            drain_timeout: Duration::from_secs(10),
            node_admins: None,
            drill_reports: None,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.store_endpoints.is_empty() {
            return Err(ConfigError::NoStoreEndpoints);
        }
        if !self.nodes.contains(&self.region) {
            return Err(ConfigError::OwnRegionWithoutNodes(self.region.clone()));
        }
        if self.health.failures == 0 || self.health.successes == 0 {
            return Err(ConfigError::ZeroThreshold);
        }
        if self.health.interval.is_zero() || self.placement_refresh.is_zero() {
            return Err(ConfigError::ZeroInterval);
        }
        if self.body_limit == 0 {
            return Err(ConfigError::ZeroBodyLimit);
        }
        self.limits.validate()?;
        if self.tls.is_some()
            && let Some(plain) = self
                .nodes
                .regions()
                .flat_map(|region| self.nodes.urls(region))
                .find(|url| !url.starts_with("https://"))
        {
            return Err(ConfigError::PlaintextNode(plain.clone()));
        }
        if self.node_timeout >= self.limits.request_deadline {
            return Err(ConfigError::NodeTimeoutPastDeadline {
                node: self.node_timeout,
                deadline: self.limits.request_deadline,
            });
        }
        Ok(())
    }
}
