//! The receiving side of Raft RPC: an axum router on its own listener
//! (apart from the client API, so client load and body limits never stall
//! heartbeats), handing each postcard request to the local `Raft`.
//!
//! Only store members may call it ([`crate::authz`]): a forged vote or
//! append from any other identity is refused before raft sees it.
//!
//! While this member is isolated ([`crate::wan`]), RPCs from another region
//! are refused before they reach raft, and so are RPCs from a region cut off
//! from it or refused one way, with an answer the sender maps to
//! `Unreachable`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};

use once_tls::Role;

use crate::authz::{self, Access, Require};
use crate::network::{APPEND_PATH, INITIALIZED_PATH, SNAPSHOT_PATH, VOTE_PATH};
use crate::types::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotError, InstallSnapshotRequest,
    InstallSnapshotResponse, Raft, RaftError, VoteRequest, VoteResponse,
};
use crate::wan::{self, REGION_HEADER, SimulatedWan};
use crate::wire::Postcard;

/// `max_body` bounds one append batch or snapshot chunk; a sender over it
/// gets 413 and splits the batch. `wan` decides which senders get through.
pub fn router(raft: Raft, max_body: usize, wan: Arc<SimulatedWan>, access: Access) -> Router {
    Router::new()
        .route(APPEND_PATH, post(append))
        .route(VOTE_PATH, post(vote))
        .route(SNAPSHOT_PATH, post(snapshot))
        .route(INITIALIZED_PATH, get(initialized))
        .layer(DefaultBodyLimit::max(max_body))
        // A partitioned sender's body is never even read.
        .layer(axum::middleware::from_fn_with_state(wan, partition))
        // Outermost: only members speak Raft, partition or not.
        .layer(axum::middleware::from_fn_with_state(
            Require {
                access,
                roles: &[Role::StoreMember],
                what: "speak Raft",
            },
            authz::require,
        ))
        .with_state(raft)
}

/// Refuses RPCs across a partition (the sender's region is in
/// `X-Once-Region`; a sender that does not say counts as another region).
async fn partition(State(wan): State<Arc<SimulatedWan>>, request: Request, next: Next) -> Response {
    let from = wan::header(request.headers(), REGION_HEADER);
    if wan.accepts(from) {
        next.run(request).await
    } else {
        wan.refusal(from)
    }
}

async fn append(
    State(raft): State<Raft>,
    Postcard(rpc): Postcard<AppendEntriesRequest>,
) -> Postcard<Result<AppendEntriesResponse, RaftError>> {
    Postcard(raft.append_entries(rpc).await)
}

async fn vote(
    State(raft): State<Raft>,
    Postcard(rpc): Postcard<VoteRequest>,
) -> Postcard<Result<VoteResponse, RaftError>> {
    Postcard(raft.vote(rpc).await)
}

async fn snapshot(
    State(raft): State<Raft>,
    Postcard(rpc): Postcard<InstallSnapshotRequest>,
) -> Postcard<Result<InstallSnapshotResponse, RaftError<InstallSnapshotError>>> {
    Postcard(raft.install_snapshot(rpc).await)
}

/// `true` once this member has a vote or a log; also `true` when it cannot
/// tell, so a founding member never initialises on a guess.
async fn initialized(State(raft): State<Raft>) -> Postcard<bool> {
    Postcard(raft.is_initialized().await.unwrap_or(true))
}
