//! Operational endpoints: liveness, readiness, metrics and the OpenAPI
//! document. None of them needs a credential.

use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use utoipa::OpenApi;

use crate::error::ApiError;
use crate::openapi::ApiDoc;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
}

/// The process is up. Says nothing about the database.
async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// Ready to serve payments: migrations ran (the node does not bind before
/// they do) and the store answers now.
async fn readyz(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    tokio::time::timeout(Duration::from_secs(2), state.store.ready())
        .await
        .map_err(|_| ApiError::Unavailable(anyhow::anyhow!("store readiness check timed out")))?
        .map_err(|e| ApiError::Unavailable(e.into()))?;
    Ok(Json(
        serde_json::json!({ "status": "ready", "region": state.config.region }),
    ))
}

async fn metrics(State(state): State<AppState>) -> Response {
    // The in-progress age is read at scrape time so it is never stale.
    if let Ok(Ok(oldest)) =
        tokio::time::timeout(Duration::from_secs(1), state.store.oldest_in_progress()).await
    {
        let age = oldest.map_or(0.0, |at| {
            state.clock.now().0.saturating_sub(at.0).max(0) as f64 / 1000.0
        });
        state.metrics.in_progress_age_max.set(age);
    }
    if let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_secs(1), state.store.unknown_count()).await
    {
        state.metrics.unknown_records.set(n);
    }
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
