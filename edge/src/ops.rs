//! The operational endpoints every role serves: `/healthz` (the process is
//! up), `/readyz` (the role's own readiness check) and `/metrics`
//! (Prometheus text, rendered by the role). None needs a credential;
//! `/metrics` is served on the admin listener only.

use std::future::Future;

use axum::Json;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::error::ApiError;

/// `/healthz` and `/readyz`. `ready` answers the readiness body (the role
/// adds what an operator wants to see, e.g. its region) or why not (`503`).
pub fn health<S, F, Fut>(ready: F) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<serde_json::Value, ApiError>> + Send + 'static,
{
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({ "status": "ok" })) }),
        )
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move { ready().await.map(Json) }
            }),
        )
}

/// `/metrics`, rendered by `render` at scrape time.
pub fn metrics<S, F, Fut>(render: F) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = String> + Send + 'static,
{
    Router::new().route(
        "/metrics",
        get(move || {
            let render = render.clone();
            async move { prometheus_text(render().await) }
        }),
    )
}

/// A Prometheus scrape answer.
pub fn prometheus_text(body: String) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}
