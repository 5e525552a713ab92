//! The operational endpoints every role serves: `/healthz` (the process is
//! up), `/readyz` (the role's own readiness check) and `/metrics`
//! (Prometheus text, rendered by the role). None needs a credential;
//! `/metrics` is served on the admin listener only.

use std::future::Future;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::error::ApiError;

/// The header of a `503` from `/readyz` that names what the role waits on
/// when that is a dependency every region shares rather than anything of
/// its own: [`SHARED_STORE`]. A router judges a region by it
/// (docs/decisions/0056-a-shared-store-outage-is-no-regions-failure.md).
pub const WAITING_ON_HEADER: &str = "x-once-waiting-on";
/// [`WAITING_ON_HEADER`]'s value for raft-store, the store of every region.
pub const SHARED_STORE: &str = "shared-store";
/// The header a prober of `/readyz` says how long it waits in, in whole
/// milliseconds: a role answers within it, naming what it still waited on
/// when that ran out, rather than let the probe time out saying nothing.
pub const ANSWER_WITHIN_HEADER: &str = "x-once-answer-within-ms";

/// Why `/readyz` is not ready: the error it answers, and whether all it
/// waits on is the store every region shares.
#[derive(Debug)]
pub struct NotReady {
    pub error: ApiError,
    pub waiting_on_shared_store: bool,
}

impl From<ApiError> for NotReady {
    fn from(error: ApiError) -> Self {
        Self {
            error,
            waiting_on_shared_store: false,
        }
    }
}

impl IntoResponse for NotReady {
    fn into_response(self) -> Response {
        let mut response = self.error.into_response();
        if self.waiting_on_shared_store {
            response.headers_mut().insert(
                WAITING_ON_HEADER,
                header::HeaderValue::from_static(SHARED_STORE),
            );
        }
        response
    }
}

/// `/healthz` and `/readyz`. `ready` answers the readiness body (the role
/// adds what an operator wants to see, e.g. its region) or why not (`503`),
/// within the time the prober gave ([`ANSWER_WITHIN_HEADER`]) if it gave one.
pub fn health<S, F, Fut>(ready: F) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    F: Fn(Option<Duration>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<serde_json::Value, NotReady>> + Send + 'static,
{
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({ "status": "ok" })) }),
        )
        .route(
            "/readyz",
            get(move |headers: HeaderMap| {
                let ready = ready.clone();
                let within = headers
                    .get(ANSWER_WITHIN_HEADER)
                    .and_then(|v| v.to_str().ok()?.parse().ok())
                    .map(Duration::from_millis);
                async move { ready(within).await.map(Json) }
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
