//! Moving tenants between regions: failover (away from a region) and
//! failback (to each tenant's preferred home).
//!
//! Every move is a compare-and-set of the tenant's placement on its epoch
//! in raft-store, so any number of routers may decide the same move at the
//! same time: one CAS applies and bumps the epoch once, the others get
//! `PlacementConflict` with the current placement, see that the tenant has
//! already left the region (or come home), and skip it.
//!
//! ```text
//! region down ─► placements() ─► for each tenant homed there:
//!     first healthy standby ─► set_placement(tenant, epoch, standby, rest + failed last)
//!         ├─ Placement        ─► moved (new epoch), cache updated
//!         └─ PlacementConflict ─► moved by someone else? skip : retry from the current one
//! ```

use std::time::{SystemTime, UNIX_EPOCH};

use once_store_client::client::{ClientError, StoreClient};
use once_store_client::command::{Placement, Reply};
use serde::Serialize;

use crate::metrics::{Metrics, MoveLabels};
use crate::placement::PlacementCache;
use crate::regions::RegionHealth;

/// CAS attempts per tenant before giving up on it for this round (each
/// conflict means another router changed the placement in between).
const MAX_CAS_ATTEMPTS: usize = 5;

/// Why a placement moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Health checks declared the region down.
    Automatic,
    /// An operator asked (`POST /admin/failover`, drills).
    Command,
    /// An operator sent tenants home (`POST /admin/failback`).
    Failback,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Automatic => "automatic",
            Self::Command => "command",
            Self::Failback => "failback",
        }
    }
}

/// One tenant this router moved.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Moved {
    pub tenant: String,
    pub from: String,
    pub to: String,
    pub epoch: u64,
    /// When the CAS applied, epoch milliseconds.
    pub at_ms: u64,
}

/// A tenant left where it was, and why.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    pub tenant: String,
    pub reason: String,
}

/// What one failover or failback did.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MoveReport {
    pub moved: Vec<Moved>,
    pub skipped: Vec<Skipped>,
}

/// A failover or failback that could not read or write the store.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("raft-store: {0}")]
    Store(#[from] ClientError),
    #[error("raft-store answered a placement write with {0:?}")]
    UnexpectedReply(Box<Reply>),
}

/// What a move needs: the store, the cache to update, this router's view of
/// region health and the counters.
#[derive(Debug, Clone, Copy)]
pub struct Mover<'a> {
    pub store: &'a StoreClient,
    pub cache: &'a PlacementCache,
    pub health: &'a RegionHealth,
    pub metrics: &'a Metrics,
}

/// Wall-clock epoch milliseconds, stamped on every failover decision.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The placement a failover away from `failed` proposes: the first healthy
/// standby becomes home; the other standbys keep their order, and the
/// failed region goes last (it is the least attractive standby, but once it
/// recovers it is still one).
pub fn failover_target(
    placement: &Placement,
    failed: &str,
    is_up: impl Fn(&str) -> bool,
) -> Option<(String, Vec<String>)> {
    let home = placement
        .standbys
        .iter()
        .find(|s| s.as_str() != failed && is_up(s))?
        .clone();
    let mut standbys: Vec<String> = placement
        .standbys
        .iter()
        .filter(|s| **s != home && s.as_str() != failed)
        .cloned()
        .collect();
    standbys.push(failed.to_owned());
    Some((home, standbys))
}

/// The placement a failback proposes: home is the preferred home again; the
/// region it leaves becomes the first standby, the others keep their order.
pub fn failback_target(placement: &Placement) -> (String, Vec<String>) {
    let home = placement.preferred_home.clone();
    let mut standbys = vec![placement.home.clone()];
    for s in &placement.standbys {
        if *s != home && !standbys.contains(s) {
            standbys.push(s.clone());
        }
    }
    (home, standbys)
}

impl Mover<'_> {
    /// Moves every tenant homed in `region` to its first healthy standby.
    #[tracing::instrument(name = "fail over a region", skip(self), fields(trigger = trigger.as_str()))]
    pub async fn fail_over(&self, region: &str, trigger: Trigger) -> Result<MoveReport, MoveError> {
        let mut report = MoveReport::default();
        for (tenant, placement) in self.store.placements().await? {
            if placement.home != region {
                continue;
            }
            self.move_tenant(&tenant, placement, trigger, &mut report, |p| {
                if p.home != region {
                    return Err(format!("already moved to {} (epoch {})", p.home, p.epoch));
                }
                // An operator's failover trusts any standby that is up; an
                // automatic one only one up for a whole detection window
                // (`crate::regions`).
                let eligible = |r: &str| match trigger {
                    Trigger::Automatic => self.health.is_settled_up(r),
                    Trigger::Command | Trigger::Failback => self.health.is_up(r),
                };
                failover_target(p, region, eligible).ok_or_else(|| "no healthy standby".to_owned())
            })
            .await?;
        }
        Ok(report)
    }

    /// Moves every tenant whose preferred home is `region`, and which lives
    /// elsewhere, back to `region`.
    #[tracing::instrument(name = "fail back to a region", skip(self))]
    pub async fn fail_back(&self, region: &str) -> Result<MoveReport, MoveError> {
        let mut report = MoveReport::default();
        for (tenant, placement) in self.store.placements().await? {
            if placement.preferred_home != region || placement.home == region {
                continue;
            }
            self.move_tenant(&tenant, placement, Trigger::Failback, &mut report, |p| {
                if p.home == p.preferred_home {
                    return Err(format!("already home (epoch {})", p.epoch));
                }
                Ok(failback_target(p))
            })
            .await?;
        }
        Ok(report)
    }

    /// CAS loop for one tenant: `decide` names the new home and standbys
    /// from the current placement, or says why the tenant stays.
    async fn move_tenant(
        &self,
        tenant: &str,
        mut current: Placement,
        trigger: Trigger,
        report: &mut MoveReport,
        decide: impl Fn(&Placement) -> Result<(String, Vec<String>), String>,
    ) -> Result<(), MoveError> {
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (home, standbys) = match decide(&current) {
                Ok(target) => target,
                Err(reason) => {
                    tracing::info!(tenant, reason, "placement left as it is");
                    report.skipped.push(Skipped {
                        tenant: tenant.to_owned(),
                        reason,
                    });
                    return Ok(());
                }
            };
            match self
                .store
                .set_placement(tenant, current.epoch, &home, &standbys)
                .await?
            {
                Reply::Placement(placement) => {
                    let moved = Moved {
                        tenant: tenant.to_owned(),
                        from: current.home.clone(),
                        to: placement.home.clone(),
                        epoch: placement.epoch,
                        at_ms: now_ms(),
                    };
                    tracing::warn!(
                        tenant,
                        from = %moved.from,
                        to = %moved.to,
                        epoch = moved.epoch,
                        at_ms = moved.at_ms,
                        trigger = trigger.as_str(),
                        "placement moved"
                    );
                    self.metrics
                        .placement_moves
                        .get_or_create(&MoveLabels {
                            from: moved.from.clone(),
                            to: moved.to.clone(),
                            trigger: trigger.as_str().to_owned(),
                        })
                        .inc();
                    self.cache.remember(tenant, Some(placement));
                    report.moved.push(moved);
                    return Ok(());
                }
                Reply::PlacementConflict { current: Some(now) } => {
                    tracing::info!(tenant, epoch = now.epoch, home = %now.home, "placement changed under us; deciding again");
                    self.cache.remember(tenant, Some(now.clone()));
                    current = now;
                }
                Reply::PlacementConflict { current: None } => {
                    report.skipped.push(Skipped {
                        tenant: tenant.to_owned(),
                        reason: "placement deleted".to_owned(),
                    });
                    return Ok(());
                }
                other => return Err(MoveError::UnexpectedReply(Box::new(other))),
            }
        }
        report.skipped.push(Skipped {
            tenant: tenant.to_owned(),
            reason: format!("placement kept changing ({MAX_CAS_ATTEMPTS} conflicts)"),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(home: &str, standbys: &[&str], preferred: &str) -> Placement {
        Placement {
            home: home.into(),
            standbys: standbys.iter().map(|s| s.to_string()).collect(),
            epoch: 3,
            preferred_home: preferred.into(),
        }
    }

    #[test]
    fn failover_picks_the_first_healthy_standby_and_puts_the_failed_region_last() {
        let p = placement("eu", &["us", "ap"], "eu");
        assert_eq!(
            failover_target(&p, "eu", |_| true),
            Some(("us".into(), vec!["ap".into(), "eu".into()]))
        );
        assert_eq!(
            failover_target(&p, "eu", |r| r != "us"),
            Some(("ap".into(), vec!["us".into(), "eu".into()]))
        );
        assert_eq!(failover_target(&p, "eu", |_| false), None);
    }

    #[test]
    fn failback_restores_the_original_order() {
        let original = placement("eu", &["us", "ap"], "eu");
        let (home, standbys) = failover_target(&original, "eu", |_| true).unwrap();
        let failed_over = Placement {
            home,
            standbys,
            ..original.clone()
        };
        let (home, standbys) = failback_target(&failed_over);
        assert_eq!(home, original.home);
        assert_eq!(standbys, original.standbys);
    }
}
