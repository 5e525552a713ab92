//! `GET /openapi.json` on the public listener: the nodes' API document,
//! so a client that reaches only the router (nodes answer routers alone,
//! over mutual TLS) can read the contract it is served by. The router does
//! not link the node crate (they meet over HTTP), so it asks a node for the
//! document — its own region's first, then the others' — the first time it
//! is asked, and keeps the bytes for the rest of its life: a document is
//! the node build's, and every node of a deployment runs the same one.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use bytes::Bytes;
use once_edge::ApiError;
use tokio::sync::OnceCell;

use crate::state::SharedState;

/// The document's path, on the router as on the node.
pub const PATH: &str = "/openapi.json";

/// `GET /openapi.json`, answered from the first node that serves it.
pub fn router() -> Router<SharedState> {
    let cached: Arc<OnceCell<Bytes>> = Arc::default();
    Router::new().route(
        PATH,
        axum::routing::get(move |State(state): State<SharedState>| {
            let cached = cached.clone();
            async move {
                match cached.get_or_try_init(|| fetch(&state)).await {
                    Ok(document) => (
                        [(header::CONTENT_TYPE, "application/json")],
                        document.clone(),
                    )
                        .into_response(),
                    Err(e) => ApiError::Unavailable(e).into_response(),
                }
            }
        }),
    )
}

/// The document from the first node that answers 200 with JSON, this
/// router's region first; the last failure when none does.
async fn fetch(state: &SharedState) -> anyhow::Result<Bytes> {
    let own = state.config.region.as_str();
    let regions = std::iter::once(own).chain(state.config.nodes.regions().filter(|r| *r != own));
    let mut last = anyhow::anyhow!("no node is configured to ask for {PATH}");
    for region in regions {
        for url in state.config.nodes.urls(region) {
            let url = format!("{}{PATH}", url.trim_end_matches('/'));
            let answer = state
                .http
                .get(&url)
                .timeout(state.config.node_timeout)
                .send()
                .await
                .and_then(reqwest::Response::error_for_status);
            match answer {
                Ok(answer) => match answer.bytes().await {
                    Ok(body) if serde_json::from_slice::<serde_json::Value>(&body).is_ok() => {
                        return Ok(body);
                    }
                    Ok(_) => last = anyhow::anyhow!("{url} answered something that is not JSON"),
                    Err(e) => last = anyhow::Error::new(e).context(format!("reading {url}")),
                },
                Err(e) => last = anyhow::Error::new(e).context(format!("asking {url}")),
            }
        }
    }
    tracing::warn!(error = %format!("{last:#}"), "no node served {PATH}");
    Err(last)
}
