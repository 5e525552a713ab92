//! `once up`'s own control endpoint (`cluster.json` → `control.url`), for
//! drills; what each restart does is [`super::restart`], the drill's client
//! and the messages are `once_drill::control`.
//!
//! - `POST /regions/{name}/restart` starts again whichever of the region's
//!   processes (store member, node) are not running — what a region's
//!   orchestrator does after an outage — waits until they answer, and
//!   records their new pids in `cluster.json`. The failover drill calls it
//!   before failing a killed region back.
//! - `POST /processes/{process}/restart` (`router`, `node-<region>`,
//!   `store-<region>`) stops one process and starts it again, with a body
//!   of optional fields: `{"stop": "term" | "kill" | "none",
//!   "clock_offset_seconds": N, "wipe": bool}`. It answers once the new
//!   process is ready: `{"process", "pid", "previous_pid", "stopped":
//!   "sigterm" | "sigkill" | "already gone", "clock_offset_seconds",
//!   "wiped"}`.
//!
//! Only the drills on this machine get in ([`super::perimeter`]): every
//! request names the endpoint in `Host`, carries no foreign `Origin`,
//! presents the control token (`cluster.json` → `control.token`, fresh
//! each run) as a bearer token and sends `Content-Type: application/json`
//! (421, 403, 401, 415 otherwise, and nothing is restarted).
//!
//! Errors are plain text: 404 for a process or region there is not, 400 for
//! a body that is not a restart request, 409 for a restart the process or
//! the machine is not ready for (still running with `"stop": "none"`,
//! libfaketime not installed), 500 when the new process fails to start.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::post;
use once_drill::control::{RestartOptions, Restarted};
use once_edge::AdminToken;

use super::perimeter::{self, Perimeter};
use super::restart::{self, Process, RestartError};
use super::{Plan, Running, START_LIMIT, STOP_GRACE};

#[derive(Debug, Clone)]
pub(crate) struct Control {
    pub plan: Arc<Plan>,
    pub running: Arc<tokio::sync::Mutex<Running>>,
    pub cluster_path: PathBuf,
}

/// Serves the control endpoint on a free local port, opened by `token`;
/// returns its URL.
pub(crate) async fn serve(control: Control, token: AdminToken) -> anyhow::Result<String> {
    let server = once_edge::Server::bind(
        "control",
        SocketAddr::from(([127, 0, 0, 1], 0)),
        once_edge::ServerLimits {
            // A restart waits for a process to stop, then for the new one
            // to be ready.
            request_deadline: STOP_GRACE + START_LIMIT + std::time::Duration::from_secs(30),
            ..once_edge::ServerLimits::default()
        },
        once_edge::EdgeMetrics::default(),
    )
    .await
    .context("binding the control endpoint")?;
    let url = format!("http://{}", server.local_addr());
    let perimeter = Arc::new(Perimeter::new(token, server.local_addr().port()));
    let app = Router::new()
        .route("/regions/{name}/restart", post(restart_region))
        .route("/processes/{process}/restart", post(restart_process))
        .with_state(control)
        .layer(axum::middleware::from_fn_with_state(
            perimeter,
            perimeter::guard,
        ));
    // Lives as long as `once up` does.
    tokio::spawn(server.serve(app, std::future::pending(), std::time::Duration::ZERO));
    Ok(url)
}

async fn restart_region(
    State(control): State<Control>,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, RestartError> {
    restart::restart_region(
        &control.plan,
        &control.running,
        &control.cluster_path,
        &name,
    )
    .await
    .map(Json)
}

async fn restart_process(
    State(control): State<Control>,
    Path(process): Path<String>,
    body: Bytes,
) -> Result<Json<Restarted>, RestartError> {
    let process = Process::parse(&process, &control.plan.layout)?;
    let options = restart_options(&body)?;
    restart::restart_process(
        &control.plan,
        &control.running,
        &control.cluster_path,
        process,
        options,
    )
    .await
    .map(Json)
}

/// The body as JSON (its content type checked by [`super::perimeter`]); no
/// body is every default.
fn restart_options(body: &[u8]) -> Result<RestartOptions, RestartError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(RestartOptions::default());
    }
    serde_json::from_slice(body).map_err(|e| RestartError::BadBody(e.to_string()))
}

#[cfg(test)]
mod tests {
    use once_drill::control::Stop;

    use super::*;

    #[test]
    fn a_body_is_optional_and_a_wrong_one_is_named() {
        assert_eq!(restart_options(b"").unwrap(), RestartOptions::default());
        assert_eq!(restart_options(b" {} ").unwrap(), RestartOptions::default());
        let options = restart_options(br#"{"stop": "kill", "wipe": true}"#).unwrap();
        assert_eq!((options.stop, options.wipe), (Stop::Kill, true));
        for bad in [
            &b"{"[..],
            br#"{"stop": "softly"}"#,
            br#"{"clock_offset": 5}"#,
        ] {
            let error = restart_options(bad).unwrap_err();
            assert!(matches!(error, RestartError::BadBody(_)), "{error}");
        }
        let unknown = restart_options(br#"{"clock_offset": 5}"#).unwrap_err();
        assert!(unknown.to_string().contains("clock_offset"), "{unknown}");
    }
}
