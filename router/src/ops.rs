//! Operational endpoints: liveness, readiness and metrics. No credential.

use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use once_node::error::ApiError;

use crate::state::SharedState;

pub fn router() -> Router<SharedState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

/// The process is up.
async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// Ready to route: the placement table has been read at least once and
/// raft-store answers now.
async fn readyz(State(state): State<SharedState>) -> Result<Json<serde_json::Value>, ApiError> {
    if !state.placements.is_loaded() {
        return Err(ApiError::Unavailable(anyhow::anyhow!(
            "placements not loaded yet"
        )));
    }
    tokio::time::timeout(Duration::from_secs(2), state.store.regions())
        .await
        .map_err(|_| {
            ApiError::Unavailable(anyhow::anyhow!("raft-store readiness check timed out"))
        })?
        .map_err(|e| ApiError::Unavailable(e.into()))?;
    Ok(Json(
        serde_json::json!({ "status": "ready", "region": state.config.region }),
    ))
}

async fn metrics(State(state): State<SharedState>) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}
