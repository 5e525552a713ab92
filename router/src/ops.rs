//! The router's operational endpoints, built from the edge's
//! ([`once_edge::ops`]): `/healthz` and `/readyz` on both listeners,
//! `/metrics` on the admin one.

use std::time::Duration;

use axum::Router;
use once_edge::ApiError;

use crate::state::SharedState;

/// `/healthz`; `/readyz`: the placement table has been read at least once
/// and raft-store answers now.
pub fn health(state: &SharedState) -> Router<SharedState> {
    let state = state.clone();
    once_edge::ops::health(move |_within| {
        let state = state.clone();
        async move {
            if !state.placements.is_loaded() {
                return Err(
                    ApiError::Unavailable(anyhow::anyhow!("placements not loaded yet")).into(),
                );
            }
            tokio::time::timeout(Duration::from_secs(2), state.store.directory().regions())
                .await
                .map_err(|_| {
                    ApiError::Unavailable(anyhow::anyhow!("raft-store readiness check timed out"))
                })?
                .map_err(|e| ApiError::Unavailable(e.into()))?;
            Ok(serde_json::json!({ "status": "ready", "region": state.config.region }).into())
        }
    })
}

/// `/metrics`.
pub fn metrics(state: &SharedState) -> Router<SharedState> {
    let state = state.clone();
    once_edge::ops::metrics(move || {
        let state = state.clone();
        async move { state.metrics.encode() }
    })
}
