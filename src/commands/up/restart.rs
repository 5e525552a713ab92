//! What the control endpoint's restarts do to the cluster `once up` runs:
//! start again a region's processes that are gone ([`restart_region`]),
//! or stop one process and start it again ([`restart_process`]) — after a
//! SIGTERM (it drains), a SIGKILL (a crash) or on its own exit, with its
//! wall clock skewed ([`super::skew`]), or, for a store member, with its
//! data directory wiped.
//!
//! Every restart holds the [`Running`] lock from the stop to the new
//! process's readiness, so restarts never interleave, and records the new
//! pid in `cluster.json` while holding it.
//!
//! A wiped member starts blank: raft-store's bootstrap never founds a
//! second cluster, so it waits to be added. Whether it stays blank is the
//! cluster's doing. One removed from the membership first stays blank
//! until an operator adds it back (`add-learner`, then
//! `change-membership`). One still in the membership is sent the log by the
//! leader as soon as it answers — a voter that lost its log and its vote,
//! which openraft calls follower log reversion: a release build logs a
//! warning and replicates from the start, a debug build's leader fails a
//! `debug_assert` and its Raft core stops (openraft's
//! `loosen-follower-log-revert` feature is off). That is the fault the
//! drill asked for; this endpoint does not second-guess it.

use std::path::Path;

use anyhow::Context;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use once_drill::control::{RestartOptions, Restarted};
use serde_json::json;

use super::children::{ChildProcess, StillRunning};
use super::layout::Layout;
use super::skew::{ClockSkew, SkewError};
use super::{Plan, Running, START_LIMIT, STOP_GRACE};

/// One process of the cluster, as the control endpoint names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Process {
    Router,
    /// Region `i`'s node.
    Node(usize),
    /// Region `i`'s raft-store member.
    Store(usize),
}

impl Process {
    /// `router`, `node-<region>` or `store-<region>`, for a region of `layout`.
    pub fn parse(name: &str, layout: &Layout) -> Result<Self, RestartError> {
        let region = |name: &str| layout.regions.iter().position(|r| r.name == name);
        let found = if name == "router" {
            Some(Self::Router)
        } else if let Some(r) = name.strip_prefix("node-") {
            region(r).map(Self::Node)
        } else if let Some(r) = name.strip_prefix("store-") {
            region(r).map(Self::Store)
        } else {
            None
        };
        found.ok_or_else(|| RestartError::UnknownProcess {
            name: name.to_owned(),
            regions: layout
                .regions
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Its name: the one it is asked for by, and its log's.
    pub fn name(self, layout: &Layout) -> String {
        match self {
            Self::Router => "router".to_owned(),
            Self::Node(i) => format!("node-{}", layout.regions[i].name),
            Self::Store(i) => format!("store-{}", layout.regions[i].name),
        }
    }

    /// Where it answers once it serves: the router's and a node's
    /// `/readyz`; a member's status, which a blank member answers too.
    /// Where it says it is ready: a router's and a node's admin listener,
    /// where Kubernetes asks (the public one may be swamped by clients).
    fn ready_url(self, plan: &Plan) -> String {
        match self {
            Self::Router => format!("http://{}/readyz", plan.layout.router_admin),
            Self::Node(i) => format!("http://{}/readyz", plan.layout.regions[i].node_admin),
            Self::Store(i) => format!("https://{}/api/status", plan.layout.regions[i].store_api),
        }
    }

    /// Starts it as every start does, `env` added.
    fn spawn(self, plan: &Plan, env: &[(&'static str, String)]) -> anyhow::Result<ChildProcess> {
        match self {
            Self::Router => plan.router(env),
            Self::Node(i) => plan.node(&plan.layout.regions[i], env),
            Self::Store(i) => plan.store(&plan.layout.regions[i], env),
        }
    }

    /// Its place among the running children; `None` once `once up` is
    /// stopping them all.
    fn slot(self, running: &mut Running) -> Option<&mut ChildProcess> {
        match self {
            Self::Router => running.router.as_mut(),
            Self::Node(i) => running.nodes.get_mut(i),
            Self::Store(i) => running.stores.get_mut(i),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum RestartError {
    #[error(
        "no process {name:?}: name `router`, `node-<region>` or `store-<region>` (regions: {regions})"
    )]
    UnknownProcess { name: String, regions: String },
    #[error("no region {0:?}")]
    UnknownRegion(String),
    #[error("the body is not a restart request: {0}")]
    BadBody(String),
    #[error("only a store member keeps data to wipe; {0} has none")]
    NothingToWipe(String),
    #[error(transparent)]
    StillRunning(#[from] StillRunning),
    #[error(transparent)]
    Skew(#[from] SkewError),
    #[error("once up is stopping the cluster")]
    Stopping,
    #[error("wiping {path}")]
    Wipe {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Starting it, waiting for it or recording it failed.
    #[error(transparent)]
    Start(#[from] anyhow::Error),
}

impl RestartError {
    fn status(&self) -> StatusCode {
        match self {
            Self::UnknownProcess { .. } | Self::UnknownRegion(_) => StatusCode::NOT_FOUND,
            Self::BadBody(_) | Self::NothingToWipe(_) | Self::Skew(SkewError::TooFar(_)) => {
                StatusCode::BAD_REQUEST
            }
            // The machine or the process is not in a state to do it.
            Self::StillRunning(_) | Self::Skew(SkewError::Missing { .. }) | Self::Stopping => {
                StatusCode::CONFLICT
            }
            Self::Skew(_) | Self::Wipe { .. } | Self::Start(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Plain text, the cause chain included: the reader is a drill's log.
impl IntoResponse for RestartError {
    fn into_response(self) -> Response {
        let status = self.status();
        (status, format!("{:#}", anyhow::Error::new(self))).into_response()
    }
}

/// Stops `process` as `options` say, starts it again (skewed, wiped) and
/// waits until it is ready; everything asked for is checked before
/// anything is stopped.
pub(crate) async fn restart_process(
    plan: &Plan,
    running: &tokio::sync::Mutex<Running>,
    cluster_path: &Path,
    process: Process,
    options: RestartOptions,
) -> Result<Restarted, RestartError> {
    let name = process.name(&plan.layout);
    let wiped_dir = match (process, options.wipe) {
        (Process::Store(i), true) => Some(plan.store_data_dir(&plan.layout.regions[i])),
        (_, true) => return Err(RestartError::NothingToWipe(name)),
        (_, false) => None,
    };
    let skew = ClockSkew::new(options.clock_offset_seconds)?;
    let env = skew.environment()?;

    let mut running = running.lock().await;
    let slot = process.slot(&mut running).ok_or(RestartError::Stopping)?;
    let previous_pid = slot.pid();
    let stopped = slot.end(options.stop, STOP_GRACE).await?;
    tracing::warn!(process = %name, previous_pid, ?stopped, "control: process stopped for a restart");
    if let Some(dir) = &wiped_dir {
        wipe(dir)?;
    }
    *slot = process.spawn(plan, &env)?;
    let pid = slot.pid();
    record_pids(cluster_path, &plan.layout, &[(process, pid)])?;
    let ready_url = process.ready_url(plan);
    slot.wait_ready(plan.pki.http(), &ready_url, START_LIMIT)
        .await?;
    skew.verify(plan.pki.http(), &name, &ready_url).await?;
    tracing::warn!(
        process = %name,
        pid,
        clock_offset_seconds = skew.offset_seconds(),
        wiped = wiped_dir.is_some(),
        "control: process restarted"
    );
    Ok(Restarted {
        process: name,
        pid,
        previous_pid,
        stopped,
        clock_offset_seconds: skew.offset_seconds(),
        wiped: wiped_dir.is_some(),
    })
}

/// Deletes a member's data directory; one that is not there is already
/// wiped.
fn wipe(dir: &Path) -> Result<(), RestartError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(RestartError::Wipe {
            path: dir.display().to_string(),
            source,
        }),
    }
}

/// Starts again whichever of region `name`'s processes (store member,
/// node) are not running — what a region's orchestrator does after an
/// outage — and waits until they answer.
pub(crate) async fn restart_region(
    plan: &Plan,
    running: &tokio::sync::Mutex<Running>,
    cluster_path: &Path,
    name: &str,
) -> Result<serde_json::Value, RestartError> {
    let Some(i) = plan.layout.regions.iter().position(|r| r.name == name) else {
        return Err(RestartError::UnknownRegion(name.to_owned()));
    };
    let mut running = running.lock().await;
    let mut restarted = Vec::new();
    // The member first: the node needs a store to be ready.
    for (process, what) in [(Process::Store(i), "store"), (Process::Node(i), "node")] {
        let slot = process.slot(&mut running).ok_or(RestartError::Stopping)?;
        if !slot.exited() {
            continue;
        }
        slot.log_exit();
        let mut child = process.spawn(plan, &[])?;
        child
            .wait_ready(plan.pki.http(), &process.ready_url(plan), START_LIMIT)
            .await?;
        *slot = child;
        restarted.push(what);
    }
    let pid =
        |process: Process, running: &mut Running| process.slot(running).map_or(0, |c| c.pid());
    let (node_pid, store_pid) = (
        pid(Process::Node(i), &mut running),
        pid(Process::Store(i), &mut running),
    );
    record_pids(
        cluster_path,
        &plan.layout,
        &[(Process::Node(i), node_pid), (Process::Store(i), store_pid)],
    )?;
    Ok(json!({
        "region": name,
        "restarted": restarted,
        "node_pid": node_pid,
        "store_pid": store_pid,
    }))
}

/// Rewrites the pids of `processes` in `cluster.json`.
fn record_pids(path: &Path, layout: &Layout, processes: &[(Process, u32)]) -> anyhow::Result<()> {
    let mut cluster: serde_json::Value = serde_json::from_slice(
        &std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("parsing {}", path.display()))?;
    for (process, pid) in processes {
        let (region, role) = match process {
            Process::Router => {
                cluster["router"]["pid"] = json!(pid);
                continue;
            }
            Process::Node(i) => (&layout.regions[*i].name, "node"),
            Process::Store(i) => (&layout.regions[*i].name, "store"),
        };
        if let Some(r) = cluster["regions"]
            .as_array_mut()
            .and_then(|rs| rs.iter_mut().find(|r| r["name"] == *region))
        {
            r[role]["pid"] = json!(pid);
        }
    }
    super::write_private(path, &serde_json::to_vec_pretty(&cluster)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_are_named_by_role_and_region() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::load_or_create(dir.path(), 3, &[]).unwrap();
        assert_eq!(Process::parse("router", &layout).unwrap(), Process::Router);
        assert_eq!(
            Process::parse("node-us-east", &layout).unwrap(),
            Process::Node(1)
        );
        let store = Process::parse("store-ap-south", &layout).unwrap();
        assert_eq!(store, Process::Store(2));
        assert_eq!(store.name(&layout), "store-ap-south");
        for unknown in ["node-mars", "provider", "store-", "eu-west", "Router"] {
            let error = Process::parse(unknown, &layout).unwrap_err();
            assert_eq!(error.status(), StatusCode::NOT_FOUND, "{unknown}");
            assert!(error.to_string().contains("eu-west, us-east, ap-south"));
        }
    }

    #[test]
    fn a_restart_records_the_new_pid_where_the_drill_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::load_or_create(dir.path(), 2, &[]).unwrap();
        let path = dir.path().join("cluster.json");
        std::fs::write(
            &path,
            json!({
                "router": {"url": "r", "pid": 1},
                "regions": [
                    {"name": "eu-west", "node": {"pid": 2}, "store": {"pid": 3}},
                    {"name": "us-east", "node": {"pid": 4}, "store": {"pid": 5}},
                ],
            })
            .to_string(),
        )
        .unwrap();
        record_pids(
            &path,
            &layout,
            &[(Process::Router, 10), (Process::Store(1), 50)],
        )
        .unwrap();
        let cluster: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(cluster["router"]["pid"], 10);
        assert_eq!(cluster["regions"][0]["node"]["pid"], 2);
        assert_eq!(cluster["regions"][1]["node"]["pid"], 4);
        assert_eq!(cluster["regions"][1]["store"]["pid"], 50);
    }
}
