//! Operator actions against a running cluster (behind `once store status |
//! add-learner | change-membership | snapshot | partition`): plain JSON over
//! each member's admin listener, with the admin token, following the leader
//! when a member redirects. `status` needs no token and is also served on
//! the client API listener (the store client finds the leader with it).
//!
//! With mutual TLS ([`Operator::with_tls`]) every request presents the
//! operator's certificate and goes to `https://`; the members let only an
//! operator identity make the changes. The plain [`status`] and
//! [`leader_endpoint`] are for members started with `--insecure-plaintext`;
//! [`Operator::status`] and [`Operator::leader_endpoint`] work with both.

use std::time::Duration;

use once_edge::AdminToken;
use serde::Serialize;

use crate::NodeId;
use crate::protocol::{
    ADD_LEARNER_PATH, AddLearner, CHANGE_MEMBERSHIP_PATH, CLOCK_ADVANCE_PATH, ChangeMembership,
    ELECT_PATH, SNAPSHOT_PATH, STATUS_PATH, Status,
};
use crate::wan::{PARTITION_PATH, PartitionState, SetPartition};

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("request to {url} failed")]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url} answered {status}: {body}")]
    Refused {
        url: String,
        status: u16,
        body: String,
    },
    #[error("no member among the endpoints is the leader")]
    NoLeader,
}

impl AdminError {
    /// No member leads, or the one asked no longer does: worth asking the
    /// next leader.
    pub fn leadership_moved(&self) -> bool {
        matches!(self, Self::NoLeader | Self::Refused { status: 421, .. })
    }
}

/// The URL of `endpoint`: as given when it is one, else `https://` (with
/// TLS) or `http://` before the `host:port`.
pub fn url_of(endpoint: &str, tls: bool) -> String {
    if endpoint.starts_with("http://") || endpoint.starts_with("https://") {
        endpoint.trim_end_matches('/').to_owned()
    } else if tls {
        format!("https://{endpoint}")
    } else {
        format!("http://{endpoint}")
    }
}

fn base(endpoint: &str) -> String {
    url_of(endpoint, false)
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("static client configuration")
}

/// An operator: the admin token on every request, and the operator's
/// certificate with mutual TLS.
#[derive(Debug, Clone)]
pub struct Operator {
    http: reqwest::Client,
    tls: bool,
}

impl Operator {
    /// Plaintext, for members started with `--insecure-plaintext`.
    pub fn new(token: &AdminToken) -> Self {
        Self::with_tls(Some(token), None)
    }

    /// With `tls`, every request presents its certificate; without a token
    /// only status and the reads an operator certificate allows work.
    pub fn with_tls(token: Option<&AdminToken>, tls: Option<&once_tls::Tls>) -> Self {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = token {
            let mut bearer =
                reqwest::header::HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                    .expect("an admin token is printable ASCII");
            bearer.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, bearer);
        }
        let builder = match tls {
            Some(tls) => tls.http_client(),
            None => reqwest::Client::builder(),
        };
        Self {
            http: builder
                .timeout(Duration::from_secs(60))
                .default_headers(headers)
                .build()
                .expect("static client configuration"),
            tls: tls.is_some(),
        }
    }

    fn url(&self, endpoint: &str, path: &str) -> String {
        format!("{}{path}", url_of(endpoint, self.tls))
    }

    /// The status of the member at `endpoint` (its API or admin listener).
    pub async fn status(&self, endpoint: &str) -> Result<Status, AdminError> {
        get_json_at(&self.http, self.url(endpoint, STATUS_PATH)).await
    }

    /// The endpoint (among `endpoints`) of the member that reports itself
    /// leader.
    pub async fn leader_endpoint(&self, endpoints: &[String]) -> Result<String, AdminError> {
        for e in endpoints {
            if let Ok(s) = self.status(e).await
                && s.leader == Some(s.id)
            {
                return Ok(e.clone());
            }
        }
        Err(AdminError::NoLeader)
    }

    /// The HTTP client, presenting the operator's certificate (record
    /// dumps and other raw reads).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }
}

/// Plaintext status (see the module docs).
pub async fn status(endpoint: &str) -> Result<Status, AdminError> {
    get_json(&http(), endpoint, STATUS_PATH).await
}

/// `GET endpoint+path`, answered as JSON.
async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    endpoint: &str,
    path: &str,
) -> Result<T, AdminError> {
    get_json_at(http, format!("{}{path}", base(endpoint))).await
}

async fn get_json_at<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: String,
) -> Result<T, AdminError> {
    let r = http
        .get(&url)
        .timeout(Duration::from_secs(3))
        .send()
        .await
        .map_err(|source| AdminError::Http {
            url: url.clone(),
            source,
        })?;
    r.json()
        .await
        .map_err(|source| AdminError::Http { url, source })
}

/// The endpoint (among `endpoints`) of the member that reports itself leader.
pub async fn leader_endpoint(endpoints: &[String]) -> Result<String, AdminError> {
    for e in endpoints {
        if let Ok(s) = status(e).await
            && s.leader == Some(s.id)
        {
            return Ok(e.clone());
        }
    }
    Err(AdminError::NoLeader)
}

async fn post<T: Serialize>(
    operator: &Operator,
    endpoint: &str,
    path: &str,
    body: &T,
) -> Result<(), AdminError> {
    let url = operator.url(endpoint, path);
    let r = operator
        .http
        .post(&url)
        .json(body)
        .send()
        .await
        .map_err(|source| AdminError::Http {
            url: url.clone(),
            source,
        })?;
    let status = r.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(());
    }
    let body = r.text().await.unwrap_or_default();
    Err(AdminError::Refused { url, status, body })
}

/// Adds `id` as a learner and waits until it has caught up with the log
/// (or received a snapshot). Waits out an election (see [`on_leader`]).
pub async fn add_learner(
    operator: &Operator,
    endpoints: &[String],
    id: NodeId,
    raft_addr: &str,
) -> Result<(), AdminError> {
    let request = &AddLearner {
        id,
        raft_addr: raft_addr.to_owned(),
    };
    on_leader(operator, endpoints, LEADER_WAIT, |leader| async move {
        post(operator, &leader, ADD_LEARNER_PATH, request).await
    })
    .await
}

/// Makes `voters` the voting members (learners not listed stay learners;
/// members in neither are removed). Waits out an election (see
/// [`on_leader`]).
pub async fn change_membership(
    operator: &Operator,
    endpoints: &[String],
    voters: Vec<NodeId>,
) -> Result<(), AdminError> {
    let request = &ChangeMembership { voters };
    on_leader(operator, endpoints, LEADER_WAIT, |leader| async move {
        post(operator, &leader, CHANGE_MEMBERSHIP_PATH, request).await
    })
    .await
}

/// How long a membership action waits for a leader.
pub const LEADER_WAIT: Duration = Duration::from_secs(15);

/// Runs `action` against the leader among `endpoints`. When none leads yet
/// (an election is under way), or the member asked answers 421 (it lost
/// its leadership meanwhile, possibly after proposing the change), it
/// finds the leader again and repeats, until `wait` has passed. Only for
/// actions that name their outcome (these voters, this learner), so that
/// repeating one that already took effect changes nothing.
async fn on_leader<F, Fut>(
    operator: &Operator,
    endpoints: &[String],
    wait: Duration,
    action: F,
) -> Result<(), AdminError>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<(), AdminError>>,
{
    let deadline = tokio::time::Instant::now() + wait;
    // Polls for a condition (some member leads) at the pace of an election.
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        let result = match operator.leader_endpoint(endpoints).await {
            Ok(leader) => action(leader).await,
            Err(e) => Err(e),
        };
        match result {
            Err(e) if e.leadership_moved() && tokio::time::Instant::now() < deadline => {}
            other => return other,
        }
    }
}

/// Builds a snapshot on the member at `endpoint` now.
pub async fn snapshot(operator: &Operator, endpoint: &str) -> Result<(), AdminError> {
    post(operator, endpoint, SNAPSHOT_PATH, &()).await
}

/// Starts an election on the member at `endpoint`.
pub async fn elect(operator: &Operator, endpoint: &str) -> Result<(), AdminError> {
    post(operator, endpoint, ELECT_PATH, &()).await
}

/// Moves the clock of the member at `endpoint` forward by `by_ms`. Only a
/// test build of raft-store (`failpoints`) has the endpoint; others answer
/// 404.
pub async fn advance_clock(
    operator: &Operator,
    endpoint: &str,
    by_ms: i64,
) -> Result<(), AdminError> {
    post(operator, endpoint, CLOCK_ADVANCE_PATH, &by_ms).await
}

/// Isolates the member at `endpoint` from every other region (`true`) or
/// heals it (`false`); see [`crate::wan`]. Its cut regions stay as they are.
pub async fn set_partition(
    operator: &Operator,
    endpoint: &str,
    isolated: bool,
) -> Result<(), AdminError> {
    post(
        operator,
        endpoint,
        PARTITION_PATH,
        &SetPartition::isolated(isolated),
    )
    .await
}

/// Cuts exactly `regions` off from the member at `endpoint` (`[]` heals
/// them all); its isolation stays as it is.
pub async fn set_cut_regions(
    operator: &Operator,
    endpoint: &str,
    regions: &[String],
) -> Result<(), AdminError> {
    post(
        operator,
        endpoint,
        PARTITION_PATH,
        &SetPartition::cut(regions),
    )
    .await
}

/// Refuses exactly `regions`' Raft RPC and clients at the member at
/// `endpoint` while it still sends to them, a one-way cut (`[]` heals them
/// all); its isolation and two-way cuts stay as they are.
pub async fn set_refused_regions(
    operator: &Operator,
    endpoint: &str,
    regions: &[String],
) -> Result<(), AdminError> {
    post(
        operator,
        endpoint,
        PARTITION_PATH,
        &SetPartition::refuse_from(regions),
    )
    .await
}

/// Whether the member at `endpoint` is isolated, which regions it cuts
/// off (both ways or one way), and its region.
pub async fn partition(operator: &Operator, endpoint: &str) -> Result<PartitionState, AdminError> {
    get_json_at(&operator.http, operator.url(endpoint, PARTITION_PATH)).await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use axum::Json;
    use axum::http::StatusCode;
    use axum::routing::{get, post};

    use super::*;

    /// A member that says it leads and answers a membership change with
    /// the statuses in `answers`, one per call (the last one repeats).
    async fn member(answers: Vec<u16>) -> (String, Arc<AtomicU32>) {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let status = serde_json::json!({
            "id": 1, "raft_addr": "127.0.0.1:1", "api_addr": "127.0.0.1:2",
            "state": "Leader", "leader": 1, "term": 3, "last_log_index": 9,
            "committed_index": 9, "applied_index": 9, "snapshot_index": null,
            "purged_index": null, "voters": [1, 2, 3], "learners": [],
            "follower_lag": {}
        });
        let app = axum::Router::new()
            .route(STATUS_PATH, get(move || async move { Json(status) }))
            .route(
                CHANGE_MEMBERSHIP_PATH,
                post(move || async move {
                    let n = counted.fetch_add(1, Ordering::SeqCst) as usize;
                    let code = answers[n.min(answers.len() - 1)];
                    StatusCode::from_u16(code).expect("a status code")
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, calls)
    }

    fn operator() -> Operator {
        Operator::new(&AdminToken::new("adm_test_token_0123456789").expect("a token"))
    }

    #[tokio::test]
    async fn a_leader_that_lost_its_leadership_is_asked_again() {
        let (url, calls) = member(vec![421, 200]).await;
        change_membership(&operator(), &[url], vec![1, 2, 3])
            .await
            .expect("the second answer is a success");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn other_refusals_are_not_repeated() {
        let (url, calls) = member(vec![503]).await;
        let e = change_membership(&operator(), &[url], vec![1, 2, 3])
            .await
            .expect_err("a 503 is an answer");
        assert!(matches!(e, AdminError::Refused { status: 503, .. }), "{e}");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_leader_that_never_comes_is_waited_for_no_longer_than_asked() {
        let (url, calls) = member(vec![421]).await;
        let e = on_leader(
            &operator(),
            &[url],
            Duration::from_millis(500),
            |leader| async move {
                let request = ChangeMembership { voters: vec![1] };
                super::post(&operator(), &leader, CHANGE_MEMBERSHIP_PATH, &request).await
            },
        )
        .await
        .expect_err("never anything but 421");
        assert!(e.leadership_moved(), "{e}");
        assert!(calls.load(Ordering::SeqCst) >= 2);
    }
}
