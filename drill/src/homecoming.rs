//! The end of a drill: every tenant sent back to its preferred home (chaos
//! always, the failover drill with `--failback`; without it the failover
//! drill reads where they are and names those away). Kills, pauses and partitions make the routers
//! fail regions over; once the region is healthy again its tenants stay
//! where they were moved until an operator fails them back. A drill that
//! left them there would hand the next run (or the operator) a cluster
//! that no longer looks like its deployment.
//!
//! ```text
//!   raft-store placements (every group) ─► tenants away from their preferred home
//!     └─ per region they belong to: POST {router}/admin/failback (again while 409 REGION_NOT_HEALTHY)
//!   raft-store placements again, until none is away or the limit ─► the tenants still away, named
//! ```
//!
//! Placements are read from raft-store, not from a router's cache: the
//! store is where a failback is written, and what every router reads.

use std::collections::BTreeMap;
use std::time::Duration;

use once_store_client::client::ClientOptions;
use once_store_client::command::Placement;
use once_store_client::groups::StoreGroups;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::client_log::{EpochMillis, now_ms};
use crate::cluster::Cluster;
use crate::failback;

/// A tenant not served from its preferred home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantAway {
    pub tenant: String,
    /// Where raft-store places it now.
    pub home: String,
    pub preferred_home: String,
}

/// One failback the drill asked of the router.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionFailback {
    pub region: String,
    pub requested_at: EpochMillis,
    pub router_status: Option<u16>,
    pub router_body: Option<String>,
}

/// What the drill found at its end, and did about it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Homecoming {
    /// Tenants away from home when the load ended.
    pub away_at_end: Vec<TenantAway>,
    pub failbacks: Vec<RegionFailback>,
    /// Tenants still away when the drill gave up: the report names each.
    pub left_away: Vec<TenantAway>,
    /// Why placements could not be read (then nothing is known to be home).
    pub error: Option<String>,
}

impl Homecoming {
    /// Every tenant is known to be at its preferred home.
    pub fn all_home(&self) -> bool {
        self.left_away.is_empty() && self.error.is_none()
    }

    /// One line for the timeline and the report.
    pub fn summary(&self) -> String {
        if let Some(e) = &self.error {
            return format!("tenants' homes NOT known: raft-store placements unreadable: {e}");
        }
        if self.away_at_end.is_empty() {
            return "every tenant at its preferred home (raft-store placements)".to_owned();
        }
        let regions: Vec<&str> = self.failbacks.iter().map(|f| f.region.as_str()).collect();
        if self.left_away.is_empty() {
            format!(
                "{} tenant(s) away at the end, failed back to {}: every tenant home",
                self.away_at_end.len(),
                regions.join(", ")
            )
        } else {
            format!(
                "{} tenant(s) LEFT AWAY from home: {}",
                self.left_away.len(),
                self.left_away
                    .iter()
                    .map(|t| format!("{} (on {}, home {})", t.tenant, t.home, t.preferred_home))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    }
}

/// raft-store's placements, every group's, one per tenant (the newest
/// epoch when two groups answer for one).
pub async fn placements(cluster: &Cluster) -> anyhow::Result<BTreeMap<String, Placement>> {
    let endpoints: Vec<String> = cluster
        .regions
        .iter()
        .filter_map(|r| r.store.as_ref().map(|s| s.api_url.clone()))
        .collect();
    let groups = StoreGroups::new(
        &endpoints,
        &cluster.store_groups,
        ClientOptions {
            tls: cluster.operator_tls()?,
            ..ClientOptions::default()
        },
    )?;
    let mut all: BTreeMap<String, Placement> = BTreeMap::new();
    for (_, group) in groups.all() {
        for (tenant, placement) in group.placements().await? {
            match all.get(&tenant) {
                Some(known) if known.epoch >= placement.epoch => {}
                _ => {
                    all.insert(tenant, placement);
                }
            }
        }
    }
    Ok(all)
}

/// The tenants `placements` puts away from their preferred home.
pub fn away(placements: &BTreeMap<String, Placement>) -> Vec<TenantAway> {
    placements
        .iter()
        .filter(|(_, p)| p.home != p.preferred_home)
        .map(|(tenant, p)| TenantAway {
            tenant: tenant.clone(),
            home: p.home.clone(),
            preferred_home: p.preferred_home.clone(),
        })
        .collect()
}

/// Where the tenants are, without moving any: the end of a failover drill
/// without `--failback`.
pub async fn survey(cluster: &Cluster) -> Homecoming {
    match placements(cluster).await {
        Ok(p) => {
            let away = away(&p);
            Homecoming {
                away_at_end: away.clone(),
                left_away: away,
                ..Homecoming::default()
            }
        }
        Err(e) => Homecoming {
            error: Some(format!("{e:#}")),
            ..Homecoming::default()
        },
    }
}

/// How often placements are read again while waiting for a failback.
const POLL: Duration = Duration::from_millis(250);

/// Fails every region with tenants away back, and waits until raft-store
/// places them home, for at most `limit`.
pub async fn bring_home(cluster: &Cluster, limit: Duration) -> Homecoming {
    let deadline = Instant::now() + limit;
    let mut homecoming = Homecoming::default();
    let first = match placements(cluster).await {
        Ok(p) => p,
        Err(e) => {
            homecoming.error = Some(format!("{e:#}"));
            return homecoming;
        }
    };
    homecoming.away_at_end = away(&first);
    let mut left = homecoming.away_at_end.clone();
    // A router may move a tenant away again before its own checks count
    // the region up (it refuses the failback meanwhile, 409): each round
    // asks again for whichever regions still have tenants away.
    let mut tick = tokio::time::interval(POLL);
    while !left.is_empty() {
        let mut regions: Vec<String> = left.iter().map(|t| t.preferred_home.clone()).collect();
        regions.sort();
        regions.dedup();
        for region in regions {
            let requested_at = now_ms();
            let (router_status, router_body) = failback::request_failback(
                cluster.router.admin(),
                cluster.router_admin_token(),
                &region,
                deadline,
            )
            .await;
            tracing::info!(%region, ?router_status, "drill: failback requested");
            homecoming.failbacks.push(RegionFailback {
                region,
                requested_at,
                router_status,
                router_body,
            });
        }
        // Raft-store applies a failback before the router answers it; a
        // few reads cover a router that answered before another moved
        // tenants away again.
        for _ in 0..8 {
            tick.tick().await;
            match placements(cluster).await {
                Ok(now) => {
                    left = away(&now);
                    homecoming.error = None;
                }
                Err(e) => homecoming.error = Some(format!("{e:#}")),
            }
            if left.is_empty() || Instant::now() >= deadline {
                break;
            }
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    homecoming.left_away = left;
    homecoming
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(home: &str, preferred: &str) -> Placement {
        Placement {
            home: home.to_owned(),
            standbys: Vec::new(),
            epoch: 1,
            preferred_home: preferred.to_owned(),
        }
    }

    #[test]
    fn a_tenant_is_away_when_it_lives_outside_its_preferred_home() {
        let placements = BTreeMap::from([
            ("acme".to_owned(), placement("eu-west", "eu-west")),
            ("globex".to_owned(), placement("ap-south", "us-east")),
        ]);
        let away = away(&placements);
        assert_eq!(
            away,
            [TenantAway {
                tenant: "globex".into(),
                home: "ap-south".into(),
                preferred_home: "us-east".into()
            }]
        );
        let left = Homecoming {
            away_at_end: away.clone(),
            left_away: away,
            ..Homecoming::default()
        };
        assert!(!left.all_home());
        assert!(
            left.summary()
                .contains("globex (on ap-south, home us-east)")
        );
        let unknown = Homecoming {
            error: Some("no leader".into()),
            ..Homecoming::default()
        };
        assert!(!unknown.all_home(), "unread placements are not all home");
    }
}
