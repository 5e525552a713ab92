//! The operational endpoints every role serves: `/healthz` (the process is
//! up), `/readyz` (the role's own readiness check) and `/metrics`
//! (Prometheus text, rendered by the role). None needs a credential;
//! `/metrics` is served on the admin listener only.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
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
/// The header of every `/readyz` answer of a node on raft-store that names
/// the groups whose leader its member had heard within its lease, comma
/// separated, `directory` for the directory (decision 0065).
pub const STORE_GROUPS_IN_REACH_HEADER: &str = "x-once-store-groups-in-reach";
/// The header of a `503` waiting on the shared store that names the groups
/// the node waits on: the directory, its own region's group, or both.
pub const WAITING_ON_GROUPS_HEADER: &str = "x-once-waiting-on-groups";
/// The header a prober of `/readyz` says how long it waits in, in whole
/// milliseconds: a role answers within it, naming what it still waited on
/// when that ran out, rather than let the probe time out saying nothing.
pub const ANSWER_WITHIN_HEADER: &str = "x-once-answer-within-ms";

/// What a node on raft-store says of the store's groups with its `/readyz`
/// answer: whose leader is in reach, and which of those its readiness
/// needs it waits on. A router tells by it a region cut off from a group
/// from a group that has no leader anywhere
/// (docs/decisions/0065-a-groups-election-is-no-regions-failure.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreGroups {
    pub in_reach: BTreeSet<String>,
    pub waiting_on: BTreeSet<String>,
}

impl StoreGroups {
    /// Writes the groups in reach always, the groups waited on when there
    /// are any. A name that cannot be a header value is left out.
    fn write(&self, headers: &mut HeaderMap) {
        let list = |groups: &BTreeSet<String>| {
            HeaderValue::from_str(
                &groups
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(","),
            )
        };
        if let Ok(value) = list(&self.in_reach) {
            headers.insert(STORE_GROUPS_IN_REACH_HEADER, value);
        }
        if self.waiting_on.is_empty() {
            return;
        }
        if let Ok(value) = list(&self.waiting_on) {
            headers.insert(WAITING_ON_GROUPS_HEADER, value);
        }
    }

    /// The groups an answer says are in reach; `None` when it does not say
    /// (a node on a SQL store, or from before the header).
    pub fn in_reach_of(headers: &HeaderMap) -> Option<BTreeSet<String>> {
        groups_of(headers, STORE_GROUPS_IN_REACH_HEADER)
    }

    /// The groups a `503` says it waits on; `None` when it does not name
    /// any: then it waits on the store as a whole.
    pub fn waiting_on_of(headers: &HeaderMap) -> Option<BTreeSet<String>> {
        groups_of(headers, WAITING_ON_GROUPS_HEADER).filter(|groups| !groups.is_empty())
    }
}

fn groups_of(headers: &HeaderMap, name: &str) -> Option<BTreeSet<String>> {
    let value = headers.get(name)?.to_str().ok()?;
    Some(
        value
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

/// `/readyz`'s `200`: the body the role shows, and what a node on
/// raft-store says of its groups.
#[derive(Debug)]
pub struct Ready {
    pub body: serde_json::Value,
    pub store_groups: Option<StoreGroups>,
}

impl From<serde_json::Value> for Ready {
    fn from(body: serde_json::Value) -> Self {
        Self {
            body,
            store_groups: None,
        }
    }
}

impl IntoResponse for Ready {
    fn into_response(self) -> Response {
        let mut response = Json(self.body).into_response();
        if let Some(groups) = &self.store_groups {
            groups.write(response.headers_mut());
        }
        response
    }
}

/// Why `/readyz` is not ready: the error it answers, whether all it waits
/// on is the store every region shares, and what a node on raft-store
/// says of its groups.
#[derive(Debug)]
pub struct NotReady {
    pub error: ApiError,
    pub waiting_on_shared_store: bool,
    pub store_groups: Option<StoreGroups>,
}

impl From<ApiError> for NotReady {
    fn from(error: ApiError) -> Self {
        Self {
            error,
            waiting_on_shared_store: false,
            store_groups: None,
        }
    }
}

impl IntoResponse for NotReady {
    fn into_response(self) -> Response {
        let mut response = self.error.into_response();
        if self.waiting_on_shared_store {
            response
                .headers_mut()
                .insert(WAITING_ON_HEADER, HeaderValue::from_static(SHARED_STORE));
        }
        if let Some(groups) = &self.store_groups {
            groups.write(response.headers_mut());
        }
        response
    }
}

/// `/healthz` and `/readyz`. `ready` answers the readiness body (the role
/// adds what an operator wants to see, e.g. its region, and a node on
/// raft-store its groups' reach) or why not (`503`),
/// within the time the prober gave ([`ANSWER_WITHIN_HEADER`]) if it gave one.
pub fn health<S, F, Fut>(ready: F) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    F: Fn(Option<Duration>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Ready, NotReady>> + Send + 'static,
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
                async move { ready(within).await }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn store_groups_read_back_from_the_answer_they_were_written_to() {
        let groups = StoreGroups {
            in_reach: set(&["directory", "eu-west"]),
            waiting_on: set(&["us-east"]),
        };
        let answer = NotReady {
            store_groups: Some(groups.clone()),
            waiting_on_shared_store: true,
            ..NotReady::from(ApiError::Unavailable(anyhow::anyhow!("waiting")))
        }
        .into_response();
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.headers()[WAITING_ON_HEADER], SHARED_STORE);
        assert_eq!(
            StoreGroups::in_reach_of(answer.headers()),
            Some(groups.in_reach.clone())
        );
        assert_eq!(
            StoreGroups::waiting_on_of(answer.headers()),
            Some(groups.waiting_on)
        );

        // Ready: groups in reach, nothing waited on.
        let ready = Ready {
            body: serde_json::json!({ "status": "ready" }),
            store_groups: Some(StoreGroups {
                in_reach: set(&["directory"]),
                waiting_on: BTreeSet::new(),
            }),
        }
        .into_response();
        assert_eq!(
            StoreGroups::in_reach_of(ready.headers()),
            Some(set(&["directory"]))
        );
        assert_eq!(StoreGroups::waiting_on_of(ready.headers()), None);

        // A role without groups says nothing of them.
        let plain = Ready::from(serde_json::json!({ "status": "ready" })).into_response();
        assert_eq!(StoreGroups::in_reach_of(plain.headers()), None);
    }
}
