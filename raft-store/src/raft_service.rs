//! The receiving side of Raft RPC: an axum router on its own listener
//! (apart from the client API, so client load and body limits never stall
//! heartbeats), handing each postcard request to the local `Raft`.
//!
//! Every request's clock is read into the member's [`ClockGuard`], and
//! every answer carries this member's clock ([`crate::clock`]); a vote
//! request from a candidate whose clock disagrees with this member's is
//! refused before raft sees it (`409`), and so is its pre-vote
//! ([`crate::leadership::pre_vote`]).
//!
//! Every answer declares this member's wire version, and the version each
//! calling member declares is recorded ([`crate::wire_versions`]).
//!
//! An append that belongs to a leader's pipelined lane waits for the
//! appends sent before it, and is written with those queued behind it
//! ([`crate::pipeline_gate`]).
//!
//! Only store members may call it ([`crate::authz`]): a forged vote or
//! append from any other identity is refused before raft sees it.
//!
//! Each of a member's groups has its own router, and refuses (`409`) an RPC
//! that names another group (`X-Once-Raft-Group`): a member added to a
//! group under the address of another of its groups (`host:port` without
//! `/groups/<name>`) would otherwise take one group's leader for its own
//! and mix two logs (RELIABILITY finding 15). An RPC that names no group
//! (a build before the header) is taken as before.
//!
//! While this member is isolated ([`crate::wan`]), RPCs from another region
//! are refused before they reach raft, and so are RPCs from a region cut off
//! from it or refused one way, with an answer the sender maps to
//! `Unreachable`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::clock::{CLOCK_HEADER, ClockGuard, MEMBER_HEADER, QUORUM_HEADER, Sample};
use crate::link::GROUP_HEADER;
use once_tls::Role;

use crate::authz::{self, Access, Require};
use crate::leadership::pre_vote::{self, PreVote, PreVoteRequest, Silence};
use crate::log_store::LogStore;
use crate::network::{
    APPEND_PATH, CAMPAIGN_PATH, INITIALIZED_PATH, PREVOTE_PATH, SNAPSHOT_PATH, VOTE_PATH,
};
use crate::pipeline_gate::{LaneGates, Ticket};
use crate::types::{
    AppendEntriesRequest, InstallSnapshotError, InstallSnapshotRequest, InstallSnapshotResponse,
    Raft, RaftError, VoteRequest, VoteResponse,
};
use crate::wan::{self, REGION_HEADER, SimulatedWan};
use crate::wire::Postcard;
use crate::wire_versions::{self, WireVersions};

/// `group` is the group this router serves (the directory's name for the
/// directory). `max_body` bounds one append batch or snapshot chunk; a sender over it
/// gets 413 and splits the batch. `wan` decides which senders get through;
/// `clock` reads and judges their clocks; `access` admits members only;
/// `prevotes` is what a pre-vote answer reads.
#[allow(clippy::too_many_arguments)]
pub fn router(
    raft: Raft,
    group: &str,
    max_body: usize,
    wan: Arc<SimulatedWan>,
    clock: Arc<ClockGuard>,
    versions: Arc<WireVersions>,
    access: Access,
    prevotes: PreVotes,
) -> Router {
    Router::new()
        .route(PREVOTE_PATH, post(pre_vote))
        .route(APPEND_PATH, post(append))
        .route(VOTE_PATH, post(vote))
        .route(SNAPSHOT_PATH, post(snapshot))
        .route(INITIALIZED_PATH, get(initialized))
        .route(CAMPAIGN_PATH, post(campaign))
        .layer(axum::Extension(clock.clone()))
        .layer(axum::Extension(prevotes))
        .layer(axum::Extension(Arc::new(LaneGates::default())))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(clock, exchange_clocks))
        .layer(axum::middleware::from_fn_with_state(
            versions.clone(),
            wire_versions::hear,
        ))
        // A partitioned sender's body is never even read.
        .layer(axum::middleware::from_fn_with_state(wan, partition))
        // Nor another group's: its version and clock are not this group's news.
        .layer(axum::middleware::from_fn_with_state(
            Arc::<str>::from(group),
            same_group,
        ))
        // Outermost: only members speak Raft, partition or not.
        .layer(axum::middleware::from_fn_with_state(
            Require {
                access,
                roles: &[Role::StoreMember],
                what: "speak Raft",
            },
            authz::require,
        ))
        // Every answer, refusals included, declares this member's version.
        .layer(axum::middleware::from_fn_with_state(
            versions,
            wire_versions::declare,
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

/// Refuses an RPC that names a group other than `served`.
async fn same_group(State(served): State<Arc<str>>, request: Request, next: Next) -> Response {
    match wan::header(request.headers(), GROUP_HEADER) {
        Some(named) if named != &*served => {
            tracing::warn!(
                named,
                served = &*served,
                "refused a Raft RPC meant for another group: the sender's leader holds this \
                 member under an address of another group"
            );
            (
                axum::http::StatusCode::CONFLICT,
                format!(
                    "{WRONG_GROUP}: this address serves group {served}, the RPC is group {named}'s"
                ),
            )
                .into_response()
        }
        _ => next.run(request).await,
    }
}

/// The start of a refusal of another group's RPC.
pub const WRONG_GROUP: &str = "wrong group";

/// Reads the sender's clock, refuses a vote to a candidate whose clock
/// disagrees with ours, and stamps our clock on the answer.
async fn exchange_clocks(
    State(clock): State<Arc<ClockGuard>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let sender = wan::header(headers, MEMBER_HEADER).and_then(|v| v.parse().ok());
    let sent = wan::header(headers, CLOCK_HEADER).and_then(|v| v.parse().ok());
    let sample = sent.map(|peer_clock| Sample {
        peer_clock,
        at: std::time::Instant::now(),
        uncertainty: std::time::Duration::ZERO,
        vouched: wan::header(headers, QUORUM_HEADER).map(|v| v == "1"),
    });
    if let (Some(sender), Some(sample)) = (sender, sample) {
        clock.record(sender, sample);
    }
    let path = request.uri().path();
    let mut response = if (path == VOTE_PATH || path == PREVOTE_PATH)
        && sample.is_some_and(|s| clock.refuses_candidate(&s))
    {
        tracing::warn!(
            candidate = ?sender,
            max_offset_ms = clock.max_offset().as_millis() as u64,
            "refused a vote: the candidate's clock disagrees with this member's"
        );
        (
            axum::http::StatusCode::CONFLICT,
            "vote refused: the candidate's clock disagrees with this member's",
        )
            .into_response()
    } else {
        next.run(request).await
    };
    response
        .headers_mut()
        .insert(CLOCK_HEADER, axum::http::HeaderValue::from(clock.now()));
    response
}

async fn append(
    State(raft): State<Raft>,
    axum::Extension(gates): axum::Extension<Arc<LaneGates>>,
    headers: axum::http::HeaderMap,
    Postcard(rpc): Postcard<AppendEntriesRequest>,
) -> Response {
    let Some(ticket) = Ticket::in_headers(&headers) else {
        return Postcard(raft.append_entries(rpc).await).into_response();
    };
    match gates.append(&raft, ticket, rpc).await {
        Ok(answer) => Postcard(answer).into_response(),
        Err(refused) => (axum::http::StatusCode::CONFLICT, refused.to_string()).into_response(),
    }
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

/// What answering a pre-vote reads besides raft: the log's last id and
/// this member's count of silence.
#[derive(Debug, Clone)]
pub struct PreVotes {
    pub log: LogStore,
    pub silence: Arc<Silence>,
}

async fn pre_vote(
    State(raft): State<Raft>,
    axum::Extension(clock): axum::Extension<Arc<ClockGuard>>,
    axum::Extension(prevotes): axum::Extension<PreVotes>,
    headers: axum::http::HeaderMap,
    Postcard(request): Postcard<PreVoteRequest>,
) -> Postcard<Result<PreVote, RaftError>> {
    let candidate = headers
        .get(crate::clock::MEMBER_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    Postcard(Ok(pre_vote::answer(
        &raft,
        &prevotes.log,
        &clock,
        &prevotes.silence,
        candidate,
        request,
    )
    .await))
}

/// The leader hands over the lead: campaign now, unless this member's
/// clock disagrees with the cluster's (`false`).
async fn campaign(
    State(raft): State<Raft>,
    axum::Extension(clock): axum::Extension<Arc<ClockGuard>>,
) -> Postcard<Result<bool, RaftError>> {
    if !clock.vouches() {
        return Postcard(Ok(false));
    }
    tracing::info!("asked by the leader to take the lead: campaigning");
    Postcard(
        raft.trigger()
            .elect()
            .await
            .map(|()| true)
            .map_err(RaftError::Fatal),
    )
}

/// `true` once this member has a vote or a log; also `true` when it cannot
/// tell, so a founding member never initialises on a guess.
async fn initialized(State(raft): State<Raft>) -> Postcard<bool> {
    Postcard(raft.is_initialized().await.unwrap_or(true))
}
