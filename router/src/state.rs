//! The state every handler and background task of a router shares.

use std::sync::Arc;

use once_edge::ApiKeys;
use once_store_client::groups::StoreGroups;

use crate::audit::FailbackTrail;
use crate::config::RouterConfig;
use crate::failover::{Mover, UnsettledEvacuations};
use crate::metrics::Metrics;
use crate::partition::RegionCut;
use crate::placement::PlacementCache;
use crate::reachability::Reachability;
use crate::regions::RegionHealth;
use crate::store_view::StoreView;

/// Shared by reference count; nothing in it is cloned per request.
pub type SharedState = Arc<RouterState>;

#[derive(Debug)]
pub struct RouterState {
    pub config: RouterConfig,
    /// The node's keys, the node's check: a request the router lets through
    /// is one the node would authenticate too (it checks again).
    pub api_keys: Arc<ApiKeys>,
    /// raft-store's groups: placements in each, region status in the
    /// directory. Used on the control runtime only (the control loops and
    /// the admin listener); a forward's one-tenant read has its own client
    /// in [`PlacementCache`].
    pub store: Arc<StoreGroups>,
    pub placements: Arc<PlacementCache>,
    /// This router's health-check view of each region (shared with the
    /// checks that outlive their round).
    pub health: Arc<RegionHealth>,
    /// What raft-store's members say of each other: whether a region's
    /// member is gone from the store's side too.
    pub store_view: Arc<StoreView>,
    /// Regions a drill has cut off from this router (`/admin/partition`):
    /// forwards and health checks treat their nodes as unreachable.
    pub partition: RegionCut,
    /// Nodes that refused a connection lately: requests skip them
    /// (fail fast) until one probe or a health check reaches them again.
    pub reachability: Reachability,
    pub metrics: Arc<Metrics>,
    /// Evacuations whose outcome is unknown, sent again by the region's
    /// next failover ([`crate::failover`]).
    pub unsettled: UnsettledEvacuations,
    /// One client for every forward: its connection pool keeps connections
    /// to each node warm.
    pub http: reqwest::Client,
    /// The health checker's and the console's client to the nodes, used on
    /// the control runtime only, so their connections are driven there.
    pub control_http: reqwest::Client,
    /// Failbacks asked for from the console, with who asked and why.
    pub failbacks: FailbackTrail,
}

impl RouterState {
    pub fn mover(&self) -> Mover<'_> {
        Mover {
            store: &self.store,
            cache: &self.placements,
            health: &self.health,
            metrics: &self.metrics,
            unsettled: &self.unsettled,
        }
    }
}
