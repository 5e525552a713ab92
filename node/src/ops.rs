//! The node's operational endpoints, built from the edge's
//! ([`once_edge::ops`]): `/healthz` and `/readyz` on both listeners,
//! `/openapi.json` on the public one, `/metrics` on the admin one.

use std::time::Duration;

use axum::{Json, Router};

use crate::error::ApiError;
use crate::openapi;
use crate::state::AppState;
use crate::store::NotReady;

/// `/healthz`; `/readyz`: migrations ran (the node does not bind before
/// they do) and the store answers now, within what the prober gives
/// ([`once_edge::ops::ANSWER_WITHIN_HEADER`], a router's check interval;
/// else 2 s). When all it waits on is raft-store, the store every region
/// shares, the `503` says so ([`once_edge::ops::WAITING_ON_HEADER`]):
/// routers do not count that against this region while every region waits
/// on it (decision 0056). On raft-store every answer names the groups
/// whose leader is in reach, and a `503` the ones it waits on: a router
/// fails a region over only when another region reaches what it waits on
/// (decision 0065).
pub fn health(state: &AppState) -> Router<AppState> {
    let state = state.clone();
    once_edge::ops::health(move |within: Option<Duration>| {
        let state = state.clone();
        async move {
            // A little of the prober's time is left for the answer's way back.
            let within = within.map_or(Duration::from_secs(2), |w| w * 3 / 4);
            let ready = state.store.health.ready(within).await;
            // Read after the verdict, from the same watches it judged by.
            let store_groups = state.store.health.store_groups();
            match ready {
                Ok(()) => Ok(once_edge::ops::Ready {
                    body: serde_json::json!({ "status": "ready", "region": state.config.region }),
                    store_groups,
                }),
                Err(not_ready) => Err(once_edge::ops::NotReady {
                    store_groups,
                    ..not_ready.into()
                }),
            }
        }
    })
}

impl From<NotReady> for once_edge::ops::NotReady {
    fn from(not_ready: NotReady) -> Self {
        let waiting_on_shared_store = matches!(not_ready, NotReady::SharedStore(_));
        let (NotReady::SharedStore(e) | NotReady::Here(e)) = not_ready;
        Self {
            error: ApiError::Unavailable(e.into()),
            waiting_on_shared_store,
            store_groups: None,
        }
    }
}

/// `/openapi.json`: the API's contract.
pub fn openapi() -> Router<AppState> {
    Router::new().route(
        "/openapi.json",
        axum::routing::get(|| async { Json(openapi::document()) }),
    )
}

/// `/metrics`. The in-progress age, the unknown-record count and the time
/// since the shared store's leader was heard are read at scrape time so
/// they are never stale.
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
            let heard = state.store.health.shared_store_leader_heard();
            state
                .metrics
                .shared_store_leader_heard
                .set(heard.map_or(f64::NAN, |ago| ago.as_secs_f64()));
            state.metrics.render()
        }
    })
}
