//! Moving tenants between regions: failover (away from a region) and
//! failback (to each tenant's preferred home).
//!
//! A move is one write to raft-store whatever the number of tenants
//! (docs/decisions/0036-bulk-placement-moves.md): in one Raft entry, every
//! tenant homed in the failed region goes to its first eligible standby
//! (`Placement::failover_target`), its epoch bumped once. The rule is
//! decided at apply, against the placements as they are then, so any number
//! of routers may decide the same move at the same time: the first entry
//! moves the tenants, the others find none homed there and move nothing.
//!
//! A failover is an *evacuation*
//! ([`once_store_client::command::Op::EvacuateRegion`],
//! docs/decisions/0055-evacuations.md): one row in raft-store that
//! placements are read through, so its apply costs the same at 10 tenants
//! or 100,000. Its answer lists no tenant; this router applies the same
//! rule to its own cache (a guess like any cached placement: a tenant it
//! gets wrong costs one 421 and a re-read). A cluster not yet at wire
//! version 4 answers `NotAgreed` and gets the older bulk move
//! ([`once_store_client::command::Op::MoveRegion`]), whose answer lists
//! every tenant it moved. A failback
//! ([`once_store_client::command::Op::ReturnHome`]) is always the listing
//! kind.
//!
//! An evacuation whose outcome is unknown (its write's deadline passed
//! after an attempt that may have reached the leader) is kept
//! ([`UnsettledEvacuations`]) and the region's next failover sends *that*
//! write again, same `(client, seq)`: raft-store answers it with its first
//! reply if it had applied, so the move it made is this router's and
//! counted in `router_placement_moves_total`. A new write would find the
//! evacuation made (`again`) and could not tell this router's from
//! another's (RELIABILITY.md finding 21).
//!
//! ```text
//! region down ─► evacuate_region(region, regions this router may fail over to)   (one Raft entry)
//!     ├─ Evacuated ─► the cache's tenants homed there moved by the same rule
//!     └─ NotAgreed ─► move_region(…) ─► Moved { moved, stranded } ─► cache updated with each
//!            └─ cache still shows tenants there (another router moved them)? ─► re-read the table
//! ```

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;
use std::time::{SystemTime, UNIX_EPOCH};

use std::sync::{Arc, Mutex};

use once_store_client::client::{ClientError, StoreClient, Unsettled, Unsettling};
use once_store_client::command::{MovedPlacement, Op, Placement, Reply};
use once_store_client::groups::StoreGroups;
use serde::Serialize;

use crate::metrics::{Metrics, MoveLabels};
use crate::placement::PlacementCache;
use crate::regions::RegionHealth;

/// Up to this many tenants moved at once, each is logged; past it, one
/// line per `(from, to)` says how many (a region of 100,000 tenants would
/// otherwise log 100,000 lines while it fails over).
const LOGGED_ONE_BY_ONE: usize = 100;

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
    /// When this router learnt that the move applied, epoch milliseconds.
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
    pub written_as: WrittenAs,
}

/// How raft-store recorded a move.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum WrittenAs {
    /// One evacuation row ([`Op::EvacuateRegion`]); `moved` is this
    /// router's cache's view of it.
    ///
    /// [`Op::EvacuateRegion`]: once_store_client::command::Op::EvacuateRegion
    Evacuation,
    /// Each tenant's placement rewritten (`MoveRegion`, `ReturnHome`), as
    /// raft-store listed them; or nothing written.
    #[default]
    PerTenant,
}

/// A failover or failback that could not read or write the store.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("raft-store: {0}")]
    Store(#[from] ClientError),
    #[error("raft-store answered a placement write with {0:?}")]
    UnexpectedReply(Box<Reply>),
    /// The region failed over is not one raft-store knows (decision 0098).
    #[error("raft-store knows no region {0:?} (UNKNOWN_REGION)")]
    UnknownRegion(String),
}

/// What a move needs: the store, the cache to update, this router's view of
/// region health and the counters.
#[derive(Debug, Clone, Copy)]
pub struct Mover<'a> {
    /// Every group: a region's tenants may live in any of them.
    pub store: &'a StoreGroups,
    pub cache: &'a PlacementCache,
    pub health: &'a RegionHealth,
    pub metrics: &'a Metrics,
    pub unsettled: &'a UnsettledEvacuations,
}

/// Evacuation writes whose outcome is unknown, by group and region, kept
/// until the region's next failover sends them again (module docs).
#[derive(Debug, Default)]
pub struct UnsettledEvacuations(Mutex<BTreeMap<(String, String), Kept>>);

/// A kept write and the cached placements homed in the region when it
/// was first sent: what it moved if it applied, whatever the cache has
/// read from the store since.
#[derive(Debug)]
struct Kept {
    write: Unsettled,
    homed: Vec<(String, Arc<Placement>)>,
}

impl UnsettledEvacuations {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Kept>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, group: &str, region: &str) -> Option<Kept> {
        self.lock().remove(&(group.to_owned(), region.to_owned()))
    }

    fn keep(&self, group: &str, region: &str, kept: Kept) {
        self.lock()
            .insert((group.to_owned(), region.to_owned()), kept);
    }

    /// Whether a write for `region` waits to be sent again: its failover
    /// goes on even once the cache shows no tenant there.
    pub fn holds(&self, region: &str) -> bool {
        self.lock().keys().any(|(_, r)| r == region)
    }

    /// Drops what is kept for `region`: it came back, and a later failover
    /// of it is a new decision, to be written anew (a kept write that had
    /// applied would answer with the old move).
    pub fn forget_region(&self, region: &str) {
        self.lock().retain(|(_, r), _| r != region);
    }
}

/// What an evacuation of `region` did to `homed` (the placements homed
/// there when it was sent), by the rule raft-store reads them by.
fn evacuated(
    region: &str,
    homed: Vec<(String, Arc<Placement>)>,
    eligible: impl Fn(&str) -> bool,
) -> Reply {
    let (mut moved, mut stranded) = (Vec::new(), Vec::new());
    for (tenant, placement) in homed {
        match placement.failover_target(region, &eligible) {
            Some(target) => moved.push(MovedPlacement {
                tenant,
                from: region.to_owned(),
                placement: placement.moved_to(target),
            }),
            None => stranded.push(tenant),
        }
    }
    moved.sort_by(|a, b| a.tenant.cmp(&b.tenant));
    stranded.sort();
    Reply::Moved { moved, stranded }
}

/// The groups' bulk-move replies as one: every tenant moved (once: the
/// cache moves a region's tenants in place on the first group's
/// evacuation, whichever group holds them) and every one stranded.
fn merged(replies: Vec<Reply>) -> Result<Reply, MoveError> {
    let (mut moved, mut stranded) = (Vec::new(), Vec::new());
    for reply in replies {
        match reply {
            Reply::Moved {
                moved: m,
                stranded: s,
            } => {
                moved.extend(m);
                stranded.extend(s);
            }
            other => return Err(MoveError::UnexpectedReply(Box::new(other))),
        }
    }
    moved.sort_by(|a, b| a.tenant.cmp(&b.tenant));
    moved.dedup_by(|a, b| a.tenant == b.tenant);
    stranded.sort();
    stranded.dedup();
    Ok(Reply::Moved { moved, stranded })
}

/// Wall-clock epoch milliseconds, stamped on every failover decision.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Mover<'_> {
    /// Moves every tenant homed in `region` to its first standby this
    /// router may fail over to, in one write.
    #[tracing::instrument(name = "fail over a region", skip(self), fields(trigger = trigger.as_str()))]
    pub async fn fail_over(&self, region: &str, trigger: Trigger) -> Result<MoveReport, MoveError> {
        // An operator's failover trusts any standby that is up; an
        // automatic one only one up for a whole detection window
        // (`crate::regions`).
        let eligible: Vec<String> = self
            .health
            .regions()
            .into_iter()
            .filter(|r| r != region)
            .filter(|r| match trigger {
                Trigger::Automatic => self.health.is_settled_up(r),
                Trigger::Command | Trigger::Failback => self.health.is_up(r),
            })
            .collect();
        let reason = || format!("no standby this router may fail over to (eligible: {eligible:?})");
        if eligible.is_empty() {
            // Nothing can move: no write. The health checker asks again
            // every round while tenants stay there, and each write would
            // read every one of them in raft-store for nothing.
            let skipped = self
                .cache
                .homed_in(region)
                .into_iter()
                .map(|tenant| Skipped {
                    tenant,
                    reason: reason(),
                })
                .collect();
            return Ok(MoveReport {
                skipped,
                ..MoveReport::default()
            });
        }
        let started = Instant::now();
        // One write per group, together: each fences its own tenants.
        let writes = self.store.all().map(|(name, group)| {
            let name = name.unwrap_or(once_store_client::groups::DIRECTORY);
            self.evacuate_in(name, group, region, &eligible)
        });
        let mut written_as = WrittenAs::Evacuation;
        let mut replies = Vec::new();
        for written in futures::future::join_all(writes).await {
            let (reply, how) = written?;
            if how == WrittenAs::PerTenant {
                written_as = how;
            }
            replies.push(reply);
        }
        let reply = merged(replies)?;
        let write_ms = started.elapsed().as_millis() as u64;
        let mut report = self.record(reply, trigger, write_ms, |_| reason())?;
        report.written_as = written_as;
        // Another router moved the tenants first (this write found none
        // homed there): this router's cache still sends them to the dead
        // region until it re-reads the table, so it does now.
        let stranded: HashSet<&str> = report.skipped.iter().map(|s| s.tenant.as_str()).collect();
        let stale = self
            .cache
            .homed_in(region)
            .iter()
            .any(|t| !stranded.contains(t.as_str()));
        if stale && let Err(e) = self.cache.refresh_all(self.metrics).await {
            tracing::warn!(region, error = %e, "re-reading placements after a failover failed; the periodic refresh retries");
        }
        Ok(report)
    }

    /// One group's share of a failover: its evacuation of `region`, as the
    /// tenants it moved (the cache's, moved in place), or each tenant moved
    /// by the older bulk move while the group does not take evacuations.
    async fn evacuate_in(
        &self,
        name: &str,
        group: &Arc<StoreClient>,
        region: &str,
        eligible: &[String],
    ) -> Result<(Reply, WrittenAs), MoveError> {
        // The write of an earlier round whose outcome is unknown goes
        // again, as itself, with the regions it allowed and the tenants
        // it moved.
        let (written, eligible, homed) = match self.unsettled.take(name, region) {
            Some(Kept { write, homed }) => {
                let allowed = match write.op() {
                    Op::EvacuateRegion { eligible, .. } => eligible.clone(),
                    _ => eligible.to_vec(),
                };
                tracing::info!(
                    region,
                    group = name,
                    "sending again the evacuation whose outcome was unknown"
                );
                (write.resend().await, allowed, homed)
            }
            None => {
                // Taken before the write: what it moves if it applies,
                // whatever the cache reads from the store before its
                // answer arrives (a periodic refresh may show the move
                // already, and then the cache has nothing left to move).
                let homed = self.cache.homed_snapshot(region);
                let written = group.evacuate_region_settled(region, eligible).await;
                (written, eligible.to_vec(), homed)
            }
        };
        let written = match written {
            Ok(reply) => reply,
            Err(Unsettling::Unknown { write, why }) => {
                let write = *write;
                self.unsettled.keep(name, region, Kept { write, homed });
                return Err(MoveError::Store(ClientError::Ambiguous(why)));
            }
            Err(Unsettling::Failed(e)) => return Err(e.into()),
        };
        let allowed = |r: &str| eligible.iter().any(|e| e == r);
        let reply = match written {
            // Another router's evacuation of the region won: nothing moved
            // (the check below re-reads the table if the cache lags).
            Reply::Evacuated {
                number,
                again: true,
            } => {
                tracing::info!(region, number, "region already evacuated");
                Reply::Moved {
                    moved: Vec::new(),
                    stranded: Vec::new(),
                }
            }
            Reply::Evacuated {
                number,
                again: false,
            } => {
                tracing::info!(region, number, "region evacuated");
                // The cache moves in place whatever it still shows there;
                // what this write moved are the tenants homed there when
                // it was first sent.
                self.cache.evacuate(region, allowed);
                evacuated(region, homed, allowed)
            }
            Reply::NotAgreed { needs, cluster } => {
                tracing::info!(
                    region,
                    needs,
                    cluster,
                    "the group does not take evacuations yet: moving each tenant"
                );
                let moved = self.remembered(group.move_region(region, &eligible).await?);
                return Ok((moved, WrittenAs::PerTenant));
            }
            // A standby this router knows and the store does not (a
            // router configured with a region the cluster never had): the
            // evacuation goes again without it, so the failover moves the
            // tenants it can instead of failing every round.
            Reply::UnknownRegion { region: unknown }
                if unknown != region && eligible.contains(&unknown) =>
            {
                tracing::error!(
                    region,
                    unknown,
                    "raft-store knows no region of this name: failing over without it; fix this router's --nodes"
                );
                let fewer: Vec<String> = eligible
                    .iter()
                    .filter(|r| **r != unknown)
                    .cloned()
                    .collect();
                if fewer.is_empty() {
                    return Err(MoveError::UnknownRegion(unknown));
                }
                return Box::pin(self.evacuate_in(name, group, region, &fewer)).await;
            }
            Reply::UnknownRegion { region } => return Err(MoveError::UnknownRegion(region)),
            other => return Err(MoveError::UnexpectedReply(Box::new(other))),
        };
        Ok((reply, WrittenAs::Evacuation))
    }

    /// Moves every tenant whose preferred home is `region`, and which lives
    /// elsewhere, back to `region`, in one write.
    #[tracing::instrument(name = "fail back to a region", skip(self))]
    pub async fn fail_back(&self, region: &str) -> Result<MoveReport, MoveError> {
        let started = Instant::now();
        let writes = self.store.all().map(|(_, group)| group.return_home(region));
        let mut replies = Vec::new();
        for written in futures::future::join_all(writes).await {
            replies.push(self.remembered(written?));
        }
        let reply = merged(replies)?;
        let write_ms = started.elapsed().as_millis() as u64;
        self.record(reply, Trigger::Failback, write_ms, |_| String::new())
    }

    /// A bulk move's reply, its placements recorded in the cache first.
    fn remembered(&self, reply: Reply) -> Reply {
        if let Reply::Moved { moved, .. } = &reply {
            self.cache.remember_all(
                moved
                    .iter()
                    .map(|m| (m.tenant.as_str(), m.placement.clone())),
            );
        }
        reply
    }

    /// Turns a bulk move's reply, already in the cache, into the report and
    /// the counters.
    fn record(
        &self,
        reply: Reply,
        trigger: Trigger,
        write_ms: u64,
        stranded_reason: impl Fn(&str) -> String,
    ) -> Result<MoveReport, MoveError> {
        let Reply::Moved { moved, stranded } = reply else {
            return Err(MoveError::UnexpectedReply(Box::new(reply)));
        };
        let at_ms = now_ms();
        let one_by_one = moved.len() <= LOGGED_ONE_BY_ONE;
        let mut report = MoveReport::default();
        let mut by_route: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
        for m in moved {
            if one_by_one {
                tracing::warn!(
                    tenant = %m.tenant,
                    from = %m.from,
                    to = %m.placement.home,
                    epoch = m.placement.epoch,
                    at_ms,
                    trigger = trigger.as_str(),
                    "placement moved"
                );
            }
            let route = by_route
                .entry((m.from.clone(), m.placement.home.clone()))
                .or_default();
            route.0 += 1;
            route.1 = route.1.max(m.placement.epoch);
            report.moved.push(Moved {
                tenant: m.tenant,
                from: m.from,
                to: m.placement.home,
                epoch: m.placement.epoch,
                at_ms,
            });
        }
        for ((from, to), (tenants, max_epoch)) in by_route {
            if !one_by_one {
                tracing::warn!(
                    %from,
                    %to,
                    tenants,
                    max_epoch,
                    at_ms,
                    trigger = trigger.as_str(),
                    "placements moved"
                );
            }
            self.metrics
                .placement_moves
                .get_or_create(&MoveLabels {
                    from,
                    to,
                    trigger: trigger.as_str().to_owned(),
                })
                .inc_by(tenants);
        }
        for tenant in stranded {
            let reason = stranded_reason(&tenant);
            tracing::info!(%tenant, reason, "placement left as it is");
            report.skipped.push(Skipped { tenant, reason });
        }
        tracing::warn!(
            moved = report.moved.len(),
            skipped = report.skipped.len(),
            write_ms,
            trigger = trigger.as_str(),
            "bulk placement move applied"
        );
        Ok(report)
    }
}
