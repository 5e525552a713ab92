//! The node's operational endpoints, built from the edge's
//! ([`once_edge::ops`]): `/healthz` and `/readyz` on both listeners,
//! `/openapi.json` on the public one, `/metrics` on the admin one.

use std::time::Duration;

use axum::{Json, Router};

use crate::error::ApiError;
use crate::openapi;
use crate::state::AppState;

/// `/healthz`; `/readyz`: migrations ran (the node does not bind before
/// they do) and the store answers now.
pub fn health(state: &AppState) -> Router<AppState> {
    let state = state.clone();
    once_edge::ops::health(move || {
        let state = state.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(2), state.store.health.ready())
                .await
                .map_err(|_| {
                    ApiError::Unavailable(anyhow::anyhow!("store readiness check timed out"))
                })?
                .map_err(|e| ApiError::Unavailable(e.into()))?;
            Ok(serde_json::json!({ "status": "ready", "region": state.config.region }))
        }
    })
}

/// `/openapi.json`: the API's contract.
pub fn openapi() -> Router<AppState> {
    Router::new().route(
        "/openapi.json",
        axum::routing::get(|| async { Json(openapi::document()) }),
    )
}

/// `/metrics`. The in-progress age and the unknown-record count are read at
/// scrape time so they are never stale.
pub fn metrics(state: &AppState) -> Router<AppState> {
    let state = state.clone();
    once_edge::ops::metrics(move || {
        let state = state.clone();
        async move {
            if let Ok(Ok(oldest)) = tokio::time::timeout(
                Duration::from_secs(1),
                state.store.health.oldest_in_progress(),
            )
            .await
            {
                let age = oldest.map_or(0.0, |at| {
                    state.clock.now().0.saturating_sub(at.0).max(0) as f64 / 1000.0
                });
                state.metrics.in_progress_age_max.set(age);
            }
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_secs(1), state.store.health.unknown_count())
                    .await
            {
                state.metrics.unknown_records.set(n);
            }
            state.metrics.render()
        }
    })
}
