//! A new cluster's first entry: the founding member initialises it once
//! every founding peer has answered that it, too, has never been part of
//! a cluster, so a wiped member restarted with its old peers never founds
//! a second one. Started by [`crate::server`] for each group it hosts.

use std::collections::BTreeMap;

use crate::network::INITIALIZED_PATH;
use crate::tasks::{GroupTasks, Lifetime};
use crate::types::{Node, NodeId, Raft};
use crate::wan::REGION_HEADER;

/// Initialises a new cluster, idempotently and only at birth:
/// - only a member started with founding peers, and only the founder: the
///   member that should lead (`founder`: the group's home member or the
///   preferred one), else the lowest id. openraft has the member that
///   initialises campaign at once, so a new group's first leader is the
///   one it should have. (Two members initialising with the same peers
///   write the same first entry, at the same default log id: still one
///   cluster.)
/// - only while it has never been part of a cluster (no vote, no log —
///   openraft's `is_initialized`), so a restarted member never does;
/// - only once *every* other founding peer has answered that it, too, has
///   never been part of one. A formed cluster always has initialised
///   members, so a founding member whose disk was wiped and that is
///   restarted with its old `--peers` waits instead of founding a second
///   cluster (it must be re-added with `add-learner`).
///
/// Runs in the background, owned by `tasks`, polling the peers until they
/// have all answered.
#[allow(clippy::too_many_arguments)]
pub(crate) fn bootstrap(
    tasks: &GroupTasks,
    raft: Raft,
    id: NodeId,
    peers: BTreeMap<NodeId, String>,
    local: std::net::IpAddr,
    region: String,
    tls: Option<once_tls::Tls>,
    founder: Option<NodeId>,
) {
    let founder = founder
        .filter(|f| peers.contains_key(f))
        .or_else(|| peers.keys().next().copied());
    if founder != Some(id) {
        return;
    }
    tasks.spawn("bootstrap", Lifetime::UntilDone, async move {
        // Says its region like any Raft RPC, so a partition applies to it too.
        let mut headers = reqwest::header::HeaderMap::new();
        if let Ok(value) = reqwest::header::HeaderValue::from_str(&region) {
            headers.insert(REGION_HEADER, value);
        }
        let builder = match &tls {
            Some(tls) => tls.http_client(),
            None => reqwest::Client::builder(),
        };
        let http = match builder
            .local_address(local)
            .default_headers(headers)
            .timeout(std::time::Duration::from_secs(2))
            .build()
        {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "bootstrap: building the peer client");
                return;
            }
        };
        let mut warned = false;
        loop {
            match raft.is_initialized().await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(error = %e, "cannot tell whether the cluster is initialised");
                    return;
                }
            }
            let scheme = if tls.is_some() { "https" } else { "http" };
            match peers_state(&http, scheme, id, &peers).await {
                PeersState::AllBlank => break,
                PeersState::SomeInitialised(peer) => {
                    tracing::warn!(
                        peer,
                        "a founding peer already belongs to a cluster: not initialising; \
                         add this member with `once store add-learner`"
                    );
                    return;
                }
                PeersState::Waiting(peer) => {
                    if !warned {
                        tracing::info!(peer, "bootstrap: waiting for every founding peer");
                        warned = true;
                    }
                }
            }
            // Polling for a condition (every peer reachable), not a fixed wait.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let members: BTreeMap<NodeId, Node> = peers
            .iter()
            .map(|(id, addr)| (*id, Node { addr: addr.clone() }))
            .collect();
        match raft.initialize(members).await {
            Ok(()) => tracing::info!(peers = ?peers.keys(), "initialised a new cluster"),
            // Someone else's vote or log arrived first: the cluster exists.
            Err(e) => tracing::info!(error = %e, "not initialising"),
        }
    });
}

enum PeersState {
    AllBlank,
    SomeInitialised(NodeId),
    Waiting(NodeId),
}

async fn peers_state(
    http: &reqwest::Client,
    scheme: &str,
    id: NodeId,
    peers: &BTreeMap<NodeId, String>,
) -> PeersState {
    for (peer, addr) in peers.iter().filter(|(p, _)| **p != id) {
        let url = format!("{scheme}://{addr}{INITIALIZED_PATH}");
        let answer = match http.get(url).send().await {
            Ok(r) if r.status().is_success() => r.bytes().await.ok(),
            _ => None,
        };
        match answer.and_then(|b| crate::wire::decode::<bool>(&b).ok()) {
            Some(true) => return PeersState::SomeInitialised(*peer),
            Some(false) => {}
            None => return PeersState::Waiting(*peer),
        }
    }
    PeersState::AllBlank
}
