//! Faults the drill injects into one region, and heals.
//!
//! - `kill`: SIGKILL the region's node and store member (pids from
//!   `cluster.json`); both are tried, and the fault counts as injected once
//!   either is down (a region with its node killed and its member refused
//!   is still a region that lost its node, and needs restarting). Nothing
//!   to heal: bringing the processes back is the supervisor's job (`once
//!   up`).
//! - `partition`: cut region R off from the other regions inside the
//!   project's own transports, by flipping every [`PartitionSwitch`]:
//!
//! ```text
//!   R's store member         POST {admin_url}/admin/partition {"isolated": true}      (admin token)
//!   every other member       POST {admin_url}/admin/partition {"cut_regions": [R]}  (admin token)
//!   the router               POST {router}/admin/partition  {"cut_regions": [R]}  (admin token)
//!   heal (all of them)       {"isolated": false} / {"cut_regions": []}
//! ```
//!
//! Both sides of every store link refuse the other, so no Raft RPC and no
//! client request declaring a region crosses the cut; the router treats R's
//! nodes as unreachable (or, if it runs in R, every other region's). A
//! switch that does not exist (HTTP 404) is reported as such, never treated
//! as cut; a partition that could not be put in place whole is undone, so
//! a half-cut cluster is never left behind.

use std::fmt::Debug;

use async_trait::async_trait;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::cluster::{Cluster, Region};

/// Where every partition switch listens, on stores and routers alike.
pub const PARTITION_PATH: &str = "/admin/partition";

#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    #[error(
        "{switch}: the partition endpoint does not exist (HTTP 404); this build cannot cut the region, so the drill did not"
    )]
    SwitchMissing { switch: String },
    #[error("{switch}: answered HTTP {status}: {body}")]
    SwitchRefused {
        switch: String,
        status: u16,
        body: String,
    },
    #[error("{switch}: unreachable: {reason}")]
    SwitchUnreachable { switch: String, reason: String },
    #[error("region {region} has no {what} pid in cluster.json: cannot kill it")]
    NoPid { region: String, what: &'static str },
    #[error("refusing to SIGKILL {what} pid {pid}: not a single other process")]
    UnsafePid { what: &'static str, pid: i32 },
    #[error("region {region} has no store member: nothing to partition")]
    NoSwitches { region: String },
    #[error("killing {what} pid {pid}: {source}")]
    Kill {
        what: &'static str,
        pid: i32,
        source: nix::Error,
    },
}

/// Which fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum FaultMode {
    /// SIGKILL the region's node and store member.
    Kill,
    /// Cut the region's links to the other regions (store and router).
    Partition,
}

/// One switch that cuts some links between the region and the others.
#[async_trait]
pub trait PartitionSwitch: Debug + Send + Sync {
    /// What the switch cuts, for reports.
    fn describe(&self) -> String;
    async fn cut(&self) -> Result<(), FaultError>;
    async fn heal(&self) -> Result<(), FaultError>;
}

/// A `POST …/admin/partition` switch: one body cuts, another heals.
#[derive(Debug, Clone)]
pub struct HttpSwitch {
    what: String,
    url: String,
    bearer: Option<String>,
    cut: Value,
    heal: Value,
    http: reqwest::Client,
}

impl HttpSwitch {
    /// The switch at `base` (a store member's admin listener or the
    /// router's): `cut` and `heal` are the two bodies it is posted.
    fn at(
        whose: &str,
        base: &str,
        what: &str,
        admin_token: &str,
        (cut, heal): (Value, Value),
        http: reqwest::Client,
    ) -> Self {
        let base = base.trim_end_matches('/');
        Self {
            what: format!("{whose} {base}{PARTITION_PATH} ({what})"),
            url: format!("{base}{PARTITION_PATH}"),
            bearer: Some(admin_token.to_owned()),
            cut,
            heal,
            http,
        }
    }

    /// The partitioned region's own store member: isolated from every
    /// other region.
    pub fn isolate_store_member(admin_url: &str, admin_token: &str, http: reqwest::Client) -> Self {
        let bodies = (json!({ "isolated": true }), json!({ "isolated": false }));
        Self::at(
            "store member",
            admin_url,
            "isolated",
            admin_token,
            bodies,
            http,
        )
    }

    /// Another region's store member: `region` is cut off from it.
    pub fn store_member_cutting(
        admin_url: &str,
        admin_token: &str,
        region: &str,
        http: reqwest::Client,
    ) -> Self {
        let bodies = (
            json!({ "cut_regions": [region] }),
            json!({ "cut_regions": [] }),
        );
        let what = format!("cuts {region}");
        Self::at("store member", admin_url, &what, admin_token, bodies, http)
    }

    /// A store member that refuses whatever `region` sends it (Raft RPC
    /// and clients declaring it) while its own traffic there still flows:
    /// one half of a link cut.
    pub fn store_member_refusing(
        admin_url: &str,
        admin_token: &str,
        region: &str,
        http: reqwest::Client,
    ) -> Self {
        let bodies = (
            json!({ "refuse_from": [region] }),
            json!({ "refuse_from": [] }),
        );
        let what = format!("refuses {region}, one way");
        Self::at("store member", admin_url, &what, admin_token, bodies, http)
    }

    /// The router: `region`'s nodes are unreachable from it (or, when it
    /// runs in `region`, every other region's).
    pub fn router_cutting(
        router_url: &str,
        admin_token: &str,
        region: &str,
        http: reqwest::Client,
    ) -> Self {
        let bodies = (
            json!({ "cut_regions": [region] }),
            json!({ "cut_regions": [] }),
        );
        let what = format!("cuts {region}");
        Self::at("router", router_url, &what, admin_token, bodies, http)
    }

    async fn post(&self, body: &Value) -> Result<(), FaultError> {
        let switch = self.describe();
        let mut request = self.http.post(&self.url).json(body);
        if let Some(token) = &self.bearer {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| FaultError::SwitchUnreachable {
                switch: switch.clone(),
                reason: e.to_string(),
            })?;
        let status = response.status().as_u16();
        match status {
            200..=299 => Ok(()),
            404 => Err(FaultError::SwitchMissing { switch }),
            _ => Err(FaultError::SwitchRefused {
                switch,
                status,
                body: response.text().await.unwrap_or_default(),
            }),
        }
    }
}

#[async_trait]
impl PartitionSwitch for HttpSwitch {
    fn describe(&self) -> String {
        self.what.clone()
    }

    async fn cut(&self) -> Result<(), FaultError> {
        self.post(&self.cut).await
    }

    async fn heal(&self) -> Result<(), FaultError> {
        self.post(&self.heal).await
    }
}

/// What happened when the fault was applied, for the timeline.
pub type FaultSteps = Vec<String>;

/// The outcome of applying a fault.
#[derive(Debug)]
pub struct Injection {
    /// The fault is in place, at least partly: some process of the region
    /// was killed, or every partition switch was cut.
    pub injected: bool,
    /// What was done.
    pub steps: FaultSteps,
    /// The first step that failed. A kill tries every process anyway; a
    /// partition stops and undoes what it cut.
    pub error: Option<FaultError>,
}

impl Injection {
    fn failed(error: FaultError) -> Self {
        Self {
            injected: false,
            steps: Vec::new(),
            error: Some(error),
        }
    }
}

/// A fault planned against one region.
#[derive(Debug)]
pub enum Fault {
    Kill {
        region: Region,
    },
    Partition {
        region: String,
        /// In the order they are cut: the region's own member first, so an
        /// old build (404) is found before anything else changed.
        switches: Vec<Box<dyn PartitionSwitch>>,
    },
}

impl Fault {
    pub fn plan(
        mode: FaultMode,
        cluster: &Cluster,
        region: &Region,
        http: &reqwest::Client,
    ) -> Self {
        match mode {
            FaultMode::Kill => Fault::Kill {
                region: region.clone(),
            },
            FaultMode::Partition => Fault::Partition {
                region: region.name.clone(),
                switches: partition_switches(cluster, region, http),
            },
        }
    }

    /// Applies the fault.
    pub async fn inject(&self) -> Injection {
        match self {
            Fault::Kill { region } => {
                let mut injection = Injection {
                    injected: false,
                    steps: Vec::new(),
                    error: None,
                };
                let node = region.node.pid.ok_or_else(|| FaultError::NoPid {
                    region: region.name.clone(),
                    what: "node",
                });
                let store = region.store.as_ref().and_then(|s| s.pid);
                if store.is_none() {
                    injection.steps.push(format!(
                        "region {} lists no store member pid: only the node is killed",
                        region.name
                    ));
                }
                // Every process is tried: one that cannot be killed does not
                // leave the others running.
                for (what, pid) in [("node", Some(node)), ("store member", store.map(Ok))] {
                    let Some(pid) = pid else { continue };
                    match pid.and_then(|pid| sigkill(what, pid)) {
                        Ok(step) => {
                            injection.injected = true;
                            injection.steps.push(step);
                        }
                        Err(e) => {
                            injection.steps.push(format!("{what} NOT killed: {e}"));
                            injection.error.get_or_insert(e);
                        }
                    }
                }
                injection
            }
            Fault::Partition { region, switches } => {
                if switches.is_empty() {
                    return Injection::failed(FaultError::NoSwitches {
                        region: region.clone(),
                    });
                }
                let mut steps = Vec::new();
                for (done, switch) in switches.iter().enumerate() {
                    if let Err(e) = switch.cut().await {
                        // All or nothing: undo what was cut, best effort
                        // (the error that stopped the cut is the one told).
                        // The failing switch is undone too, unless it does
                        // not exist: it may have cut before its answer was
                        // lost, and healing a switch that never cut changes
                        // nothing.
                        let applied = match e {
                            FaultError::SwitchMissing { .. } => &switches[..done],
                            _ => &switches[..=done],
                        };
                        for undo in applied.iter().rev() {
                            if let Err(heal) = undo.heal().await {
                                tracing::error!(error = %heal, "undoing a partial partition");
                            }
                        }
                        return Injection::failed(e);
                    }
                    steps.push(format!("cut {}", switch.describe()));
                }
                Injection {
                    injected: true,
                    steps,
                    error: None,
                }
            }
        }
    }

    /// Undoes the fault where the drill can. Every switch is healed even if
    /// one fails; the first failure is returned.
    pub async fn heal(&self) -> Result<FaultSteps, FaultError> {
        match self {
            Fault::Kill { .. } => Ok(vec![
                "kill: nothing to heal from here; the region comes back when its processes are restarted".to_owned(),
            ]),
            Fault::Partition { switches, .. } => {
                let mut steps = Vec::new();
                let mut first_error = None;
                for switch in switches.iter().rev() {
                    match switch.heal().await {
                        Ok(()) => steps.push(format!("healed {}", switch.describe())),
                        Err(e) => {
                            tracing::error!(error = %e, "healing a partition switch");
                            first_error.get_or_insert(e);
                        }
                    }
                }
                match first_error {
                    None => Ok(steps),
                    Some(e) => Err(e),
                }
            }
        }
    }
}

/// Every switch of a partition of `region`: its own store member isolated,
/// every other region's member cutting it, the router cutting it. Empty
/// when `region` has no store member (there is nothing to isolate).
fn partition_switches(
    cluster: &Cluster,
    region: &Region,
    http: &reqwest::Client,
) -> Vec<Box<dyn PartitionSwitch>> {
    let Some(own) = &region.store else {
        return Vec::new();
    };
    let mut switches: Vec<Box<dyn PartitionSwitch>> = vec![Box::new(
        HttpSwitch::isolate_store_member(own.admin(), cluster.store_operator_token(), http.clone()),
    )];
    for other in cluster.regions.iter().filter(|r| r.name != region.name) {
        if let Some(store) = &other.store {
            switches.push(Box::new(HttpSwitch::store_member_cutting(
                store.admin(),
                cluster.store_operator_token(),
                &region.name,
                http.clone(),
            )));
        }
    }
    switches.push(Box::new(HttpSwitch::router_cutting(
        cluster.router.admin(),
        cluster.router_admin_token(),
        &region.name,
        http.clone(),
    )));
    switches
}

fn sigkill(what: &'static str, pid: i32) -> Result<String, FaultError> {
    // kill(0 | -1 | -n) signals process groups or everyone, and our own pid
    // would end the drill: a cluster.json naming those is refused.
    if pid <= 1 || u32::try_from(pid).is_ok_and(|p| p == std::process::id()) {
        return Err(FaultError::UnsafePid { what, pid });
    }
    match kill(Pid::from_raw(pid), Signal::SIGKILL) {
        Ok(()) => Ok(format!("SIGKILL {what} pid {pid}")),
        // Already gone: the region is down all the same; say so.
        Err(nix::Error::ESRCH) => Ok(format!("{what} pid {pid} was already gone")),
        Err(source) => Err(FaultError::Kill { what, pid, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_that_are_groups_or_the_drill_itself_are_never_signalled() {
        for pid in [0, 1, -1, -42, i32::try_from(std::process::id()).unwrap()] {
            assert!(matches!(
                sigkill("node", pid),
                Err(FaultError::UnsafePid { .. })
            ));
        }
    }
}
