//! `once up`'s own control endpoint (`cluster.json` → `control.url`), for
//! drills: `POST /regions/{name}/restart` starts again whichever of the
//! region's processes (store member, node) are not running — what a
//! region's orchestrator does after an outage — waits until they answer,
//! and records their new pids in `cluster.json`. The failover drill calls it
//! before failing a killed region back.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::json;

use super::children::ChildProcess;
use super::{Plan, Running, START_LIMIT};

#[derive(Debug, Clone)]
pub(crate) struct Control {
    pub plan: Arc<Plan>,
    pub running: Arc<tokio::sync::Mutex<Running>>,
    pub cluster_path: PathBuf,
}

/// Serves the control endpoint on a free local port; returns its URL.
pub(crate) async fn serve(control: Control) -> anyhow::Result<String> {
    let server = once_edge::Server::bind(
        "control",
        SocketAddr::from(([127, 0, 0, 1], 0)),
        once_edge::ServerLimits {
            // A restart waits for the region's processes to be ready.
            request_deadline: START_LIMIT + std::time::Duration::from_secs(30),
            ..once_edge::ServerLimits::default()
        },
        once_edge::EdgeMetrics::default(),
    )
    .await
    .context("binding the control endpoint")?;
    let url = format!("http://{}", server.local_addr());
    let app = Router::new()
        .route("/regions/{name}/restart", post(restart))
        .with_state(control);
    // Lives as long as `once up` does.
    tokio::spawn(server.serve(app, std::future::pending(), std::time::Duration::ZERO));
    Ok(url)
}

/// Whether a child is gone (killed, crashed) and must be started again.
fn exited(child: &mut ChildProcess) -> bool {
    !matches!(child.child.try_wait(), Ok(None))
}

async fn restart(
    State(control): State<Control>,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, (StatusCode, String)> {
    let plan = &control.plan;
    let Some(i) = plan.layout.regions.iter().position(|r| r.name == name) else {
        return Err((StatusCode::NOT_FOUND, format!("no region {name}")));
    };
    let region = &plan.layout.regions[i];
    let failed = |e: anyhow::Error| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}"));
    let mut running = control.running.lock().await;
    let mut restarted = Vec::new();
    if exited(&mut running.stores[i]) {
        let mut store = plan.store(region).map_err(failed)?;
        store
            .wait_ready(
                &format!("http://{}/api/status", region.store_api),
                START_LIMIT,
            )
            .await
            .map_err(failed)?;
        running.stores[i] = store;
        restarted.push("store");
    }
    if exited(&mut running.nodes[i]) {
        let mut node = plan.node(region).map_err(failed)?;
        node.wait_ready(&format!("http://{}/readyz", region.node), START_LIMIT)
            .await
            .map_err(failed)?;
        running.nodes[i] = node;
        restarted.push("node");
    }
    let (node_pid, store_pid) = (running.nodes[i].pid(), running.stores[i].pid());
    drop(running);
    record_pids(&control.cluster_path, &name, node_pid, store_pid).map_err(failed)?;
    Ok(Json(json!({
        "region": name,
        "restarted": restarted,
        "node_pid": node_pid,
        "store_pid": store_pid,
    })))
}

/// Rewrites the region's pids in `cluster.json`.
fn record_pids(path: &std::path::Path, region: &str, node: u32, store: u32) -> anyhow::Result<()> {
    let mut cluster: serde_json::Value = serde_json::from_slice(&std::fs::read(path)?)?;
    if let Some(r) = cluster["regions"]
        .as_array_mut()
        .and_then(|rs| rs.iter_mut().find(|r| r["name"] == region))
    {
        r["node"]["pid"] = json!(node);
        r["store"]["pid"] = json!(store);
    }
    super::write_private(path, &serde_json::to_vec_pretty(&cluster)?)
}
