//! Faults the drill injects into one region, and heals.
//!
//! - `kill`: SIGKILL the region's node and store member (pids from
//!   `cluster.json`). Nothing to heal: bringing the processes back is the
//!   supervisor's job (`once up`).
//! - `partition`: flip every [`PartitionSwitch`] of the region to isolated,
//!   and back when healed. Today the only switch is the store member's
//!   `POST {api_url}/admin/partition {"isolated": bool}`; nodes and routers
//!   get theirs later, as more implementations of the trait. A switch that
//!   does not exist (HTTP 404) is reported as such, never treated as cut.

use std::fmt::Debug;

use async_trait::async_trait;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::cluster::Region;

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
    /// Isolate the region's inter-region transports.
    Partition,
}

/// One switch that isolates a member from the other regions.
#[async_trait]
pub trait PartitionSwitch: Debug + Send + Sync {
    /// What the switch cuts, for reports.
    fn describe(&self) -> String;
    async fn set_isolated(&self, isolated: bool) -> Result<(), FaultError>;
}

/// A raft-store member's `POST /admin/partition`.
#[derive(Debug, Clone)]
pub struct StorePartition {
    pub api_url: String,
    http: reqwest::Client,
}

impl StorePartition {
    pub fn new(api_url: &str, http: reqwest::Client) -> Self {
        Self {
            api_url: api_url.trim_end_matches('/').to_owned(),
            http,
        }
    }
}

#[async_trait]
impl PartitionSwitch for StorePartition {
    fn describe(&self) -> String {
        format!("store member {}/admin/partition", self.api_url)
    }

    async fn set_isolated(&self, isolated: bool) -> Result<(), FaultError> {
        let switch = self.describe();
        let response = self
            .http
            .post(format!("{}/admin/partition", self.api_url))
            .json(&serde_json::json!({ "isolated": isolated }))
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

/// What happened when the fault was applied, for the timeline.
pub type FaultSteps = Vec<String>;

/// A fault planned against one region.
#[derive(Debug)]
pub enum Fault {
    Kill {
        region: Region,
    },
    Partition {
        region: String,
        switches: Vec<Box<dyn PartitionSwitch>>,
    },
}

impl Fault {
    pub fn plan(mode: FaultMode, region: &Region, http: &reqwest::Client) -> Self {
        match mode {
            FaultMode::Kill => Fault::Kill {
                region: region.clone(),
            },
            FaultMode::Partition => Fault::Partition {
                region: region.name.clone(),
                switches: region
                    .store
                    .iter()
                    .map(|s| {
                        Box::new(StorePartition::new(&s.api_url, http.clone()))
                            as Box<dyn PartitionSwitch>
                    })
                    .collect(),
            },
        }
    }

    /// Applies the fault; the steps taken, or the first that failed.
    pub async fn inject(&self) -> Result<FaultSteps, FaultError> {
        match self {
            Fault::Kill { region } => {
                let node = region.node.pid.ok_or_else(|| FaultError::NoPid {
                    region: region.name.clone(),
                    what: "node",
                })?;
                let mut steps = vec![sigkill("node", node)?];
                match region.store.as_ref().and_then(|s| s.pid) {
                    Some(store) => steps.push(sigkill("store member", store)?),
                    None => steps.push(format!(
                        "region {} lists no store member pid: only the node was killed",
                        region.name
                    )),
                }
                Ok(steps)
            }
            Fault::Partition { region, switches } => {
                if switches.is_empty() {
                    return Err(FaultError::NoSwitches {
                        region: region.clone(),
                    });
                }
                let mut steps = Vec::new();
                for switch in switches {
                    switch.set_isolated(true).await?;
                    steps.push(format!("isolated {}", switch.describe()));
                }
                Ok(steps)
            }
        }
    }

    /// Undoes the fault where the drill can.
    pub async fn heal(&self) -> Result<FaultSteps, FaultError> {
        match self {
            Fault::Kill { .. } => Ok(vec![
                "kill: nothing to heal from here; the region comes back when its processes are restarted".to_owned(),
            ]),
            Fault::Partition { switches, .. } => {
                let mut steps = Vec::new();
                for switch in switches {
                    switch.set_isolated(false).await?;
                    steps.push(format!("healed {}", switch.describe()));
                }
                Ok(steps)
            }
        }
    }
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
