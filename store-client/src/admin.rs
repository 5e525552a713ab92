//! Operator actions against a running cluster (behind `once store status |
//! add-learner | change-membership | snapshot | partition`): plain JSON over
//! each member's admin listener, with the admin token, following the leader
//! when a member redirects. `status` needs no token and is also served on
//! the client API listener (the store client finds the leader with it).

use std::time::Duration;

use once_edge::AdminToken;
use serde::Serialize;

use crate::NodeId;
use crate::protocol::{
    ADD_LEARNER_PATH, AddLearner, CHANGE_MEMBERSHIP_PATH, ChangeMembership, ELECT_PATH,
    SNAPSHOT_PATH, STATUS_PATH, Status,
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

fn base(endpoint: &str) -> String {
    if endpoint.starts_with("http") {
        endpoint.trim_end_matches('/').to_owned()
    } else {
        format!("http://{endpoint}")
    }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("static client configuration")
}

/// An operator: the admin token on every request.
#[derive(Debug, Clone)]
pub struct Operator {
    http: reqwest::Client,
}

impl Operator {
    pub fn new(token: &AdminToken) -> Self {
        let mut headers = reqwest::header::HeaderMap::new();
        let mut bearer =
            reqwest::header::HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                .expect("an admin token is printable ASCII");
        bearer.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, bearer);
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .default_headers(headers)
                .build()
                .expect("static client configuration"),
        }
    }
}

pub async fn status(endpoint: &str) -> Result<Status, AdminError> {
    get_json(&http(), endpoint, STATUS_PATH).await
}

/// `GET endpoint+path`, answered as JSON.
async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    endpoint: &str,
    path: &str,
) -> Result<T, AdminError> {
    let url = format!("{}{path}", base(endpoint));
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
    let url = format!("{}{path}", base(endpoint));
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
/// (or received a snapshot).
pub async fn add_learner(
    operator: &Operator,
    endpoints: &[String],
    id: NodeId,
    raft_addr: &str,
) -> Result<(), AdminError> {
    let leader = leader_endpoint(endpoints).await?;
    post(
        operator,
        &leader,
        ADD_LEARNER_PATH,
        &AddLearner {
            id,
            raft_addr: raft_addr.to_owned(),
        },
    )
    .await
}

/// Makes `voters` the voting members (learners not listed stay learners;
/// members in neither are removed).
pub async fn change_membership(
    operator: &Operator,
    endpoints: &[String],
    voters: Vec<NodeId>,
) -> Result<(), AdminError> {
    let leader = leader_endpoint(endpoints).await?;
    post(
        operator,
        &leader,
        CHANGE_MEMBERSHIP_PATH,
        &ChangeMembership { voters },
    )
    .await
}

/// Builds a snapshot on the member at `endpoint` now.
pub async fn snapshot(operator: &Operator, endpoint: &str) -> Result<(), AdminError> {
    post(operator, endpoint, SNAPSHOT_PATH, &()).await
}

/// Starts an election on the member at `endpoint`.
pub async fn elect(operator: &Operator, endpoint: &str) -> Result<(), AdminError> {
    post(operator, endpoint, ELECT_PATH, &()).await
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
    get_json(&operator.http, endpoint, PARTITION_PATH).await
}
