//! The receiving side of Raft RPC: an axum router on its own listener
//! (apart from the client API, so client load and body limits never stall
//! heartbeats), handing each postcard request to the local `Raft`.

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post};

use crate::network::{APPEND_PATH, INITIALIZED_PATH, SNAPSHOT_PATH, VOTE_PATH};
use crate::types::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotError, InstallSnapshotRequest,
    InstallSnapshotResponse, Raft, RaftError, VoteRequest, VoteResponse,
};
use crate::wire::Postcard;

/// `max_body` bounds one append batch or snapshot chunk; a sender over it
/// gets 413 and splits the batch.
pub fn router(raft: Raft, max_body: usize) -> Router {
    Router::new()
        .route(APPEND_PATH, post(append))
        .route(VOTE_PATH, post(vote))
        .route(SNAPSHOT_PATH, post(snapshot))
        .route(INITIALIZED_PATH, get(initialized))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(raft)
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
