//! The sending side of Raft RPC over HTTP: one shared `reqwest::Client`
//! (connection pool per peer), postcard bodies, and the error mapping
//! openraft's replication relies on:
//!
//! | what happened | openraft error | openraft does |
//! |---|---|---|
//! | connection refused / reset before sending | `Unreachable` | backs off |
//! | no answer within the append budget or the RPC's time | `Timeout` | retries |
//! | openraft's wait ended first (the append goes on, [`crate::append_in_flight`]) | `Timeout` | retries, and gets the answer of the one in flight |
//! | other transport failure, undecodable answer | `Network` | retries at once |
//! | body over the limit (checked before sending, or 413) | `PayloadTooLarge` | halves the batch |
//! | the peer answered with a Raft error | `RemoteError` | acts on it |
//! | partitioned ([`crate::wan`]): cut off here, or refused by the peer | `Unreachable` | backs off |
//!
//! Every RPC carries this member's region (`X-Once-Region`) and wire
//! version, records the peer's version from the answer
//! ([`crate::wire_versions`]) and, to a member of another region, first
//! waits the simulated WAN latency.
//!
//! # Commit notices do not hold up the next append
//!
//! openraft 0.9 keeps one append-entries RPC in flight per follower. When
//! an entry commits, it sends each follower an empty append carrying the
//! new commit index (a *commit notice*), and the next entry — typically the
//! next claim or the finish of the payment just claimed — waits for that
//! notice's answer: one extra round trip per write across regions.
//!
//! A [`Connection`] therefore answers such a notice itself, at once, with
//! `Success`, and sends it in the background (at most one at a time; a
//! newer one replaces one still waiting). It does so only when the answer
//! is already known to be true: the request carries no entries and its
//! `prev_log_id` is exactly what the follower last confirmed holding on
//! this connection, under the same vote. For such a request openraft
//! updates no matching index (a heartbeat has no request id), so the
//! faked answer can never make an entry look replicated that is not: commit
//! decisions still rest on real answers only. What the background send
//! learns that matters — a higher vote — is answered on the next call,
//! and the leader steps down one call later than it would have. Conflicts
//! and transport errors are left for the next real append, which meets
//! them too.
//!
//! openraft's vote requests use a fresh connection per call, which has
//! confirmed nothing, so they always go over the wire and wait for the real
//! answer. raft-store's own leadership RPCs (pre-votes, campaign requests,
//! the read index's probes, [`crate::leadership`]) use no connection at
//! all: each is one call over the peer's link.
//!
//! # Pipelined appends
//!
//! To a follower that orders lanes (wire version [`PIPELINED_SINCE`] on),
//! a connection of a member built [`Network::with_pipeline`] replaces the
//! commit notice lane with a [`crate::pipeline`] lane: after each real
//! answer it opens one at the confirmed position, and answers openraft's
//! appends from it for as long as it holds.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::NetworkError;
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};

use tokio::sync::watch;

use crate::append_in_flight::{self, AppendAnswer, AppendInFlight};
use crate::clock::ClockGuard;
use crate::link::Link;
use crate::pipeline::{Lane, LaneAnswer, PIPELINED_SINCE, Pipeline};
use crate::types::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotError, InstallSnapshotRequest,
    InstallSnapshotResponse, LogId, Node, NodeId, RpcError, TypeConfig, Vote, VoteRequest,
    VoteResponse,
};
use crate::wan::{SimulatedWan, WanConfig};
use crate::wire;
use crate::wire_versions::WireVersions;

pub use crate::link::{
    APPEND_PATH, CAMPAIGN_PATH, INITIALIZED_PATH, PREVOTE_PATH, SNAPSHOT_PATH, VOTE_PATH,
};

/// Builds a connection to each peer from one shared HTTP client.
#[derive(Debug, Clone)]
pub struct Network {
    id: NodeId,
    http: reqwest::Client,
    /// `https` with a certificate (every peer is then dialled with mutual
    /// TLS, presenting this member's certificate), `http` without.
    scheme: &'static str,
    max_body: usize,
    wan: Arc<SimulatedWan>,
    clock: Arc<ClockGuard>,
    versions: Arc<WireVersions>,
    pipeline: Option<Pipeline>,
    /// The group whose RPCs this network carries.
    group: Arc<str>,
    /// How long one append may take ([`crate::append_in_flight`]).
    append_budget: Duration,
}

impl Network {
    /// `local_address` binds outgoing sockets to this member's own address,
    /// so per-address firewall rules (a partition test) see who sends.
    pub fn new(
        id: NodeId,
        local_address: Option<IpAddr>,
        connect_timeout: Duration,
        max_body: usize,
        tls: Option<&once_tls::Tls>,
    ) -> reqwest::Result<Self> {
        let (builder, scheme) = match tls {
            Some(tls) => (tls.http_client().https_only(true), "https"),
            None => (reqwest::Client::builder(), "http"),
        };
        let http = builder
            .local_address(local_address)
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .pool_max_idle_per_host(4)
            .build()?;
        Ok(Self {
            id,
            http,
            scheme,
            max_body,
            wan: Arc::new(SimulatedWan::new(WanConfig::alone(id))),
            clock: Arc::new(ClockGuard::new(
                id,
                Duration::from_millis(500),
                Duration::from_millis(300),
            )),
            versions: Arc::new(WireVersions::new(id, wire::WIRE_VERSION)),
            pipeline: None,
            group: Arc::from(once_store_client::groups::DIRECTORY),
            append_budget: Duration::from_secs(1),
        })
    }

    /// Pipelines appends to the followers that order them, pushing what
    /// `pipeline`'s log appends ([`crate::pipeline`]).
    pub fn with_pipeline(self, pipeline: Pipeline) -> Self {
        Self {
            pipeline: Some(pipeline),
            ..self
        }
    }

    /// Reads the peers' clocks into `clock`, and vouches by it.
    pub fn with_clock(self, clock: Arc<ClockGuard>) -> Self {
        Self { clock, ..self }
    }

    /// Sends through `wan`: its latency and partition apply to every RPC.
    pub fn with_wan(self, wan: Arc<SimulatedWan>) -> Self {
        Self { wan, ..self }
    }

    /// The RPC link to member `target` at `node`.
    pub(crate) fn link_to(&self, target: NodeId, node: &Node) -> Arc<Link> {
        Arc::new(Link {
            id: self.id,
            target,
            group: self.group.clone(),
            base: format!("{}://{}", self.scheme, node.addr),
            http: self.http.clone(),
            max_body: self.max_body,
            wan: self.wan.clone(),
            clock: self.clock.clone(),
            versions: self.versions.clone(),
            round_trips: Mutex::default(),
            append_budget: self.append_budget,
        })
    }

    /// Declares this member's version on every RPC and records each peer's
    /// from its answers.
    pub fn with_versions(self, versions: Arc<WireVersions>) -> Self {
        Self { versions, ..self }
    }

    /// Lets one append take up to `budget`, however long openraft waits
    /// for it (1 s unless told; a member gives its `election_max`).
    pub fn with_append_budget(self, budget: Duration) -> Self {
        Self {
            append_budget: budget,
            ..self
        }
    }

    /// How long one append may take ([`Self::with_append_budget`]).
    pub fn append_budget(&self) -> Duration {
        self.append_budget
    }

    /// Names `group` on every RPC (the directory unless told): a peer
    /// refuses what reaches another of its groups.
    pub fn with_group(self, group: &str) -> Self {
        Self {
            group: Arc::from(group),
            ..self
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Connection {
        Connection {
            link: self.link_to(target, node),
            in_flight: None,
            confirmed: None,
            notices: None,
            pipeline: self.pipeline.clone(),
            lane: None,
        }
    }
}

/// RPCs to one peer. openraft keeps one per replication stream for as long
/// as the stream lives, and makes a fresh one for each vote request and
/// each leadership check.
#[derive(Debug)]
pub struct Connection {
    link: Arc<Link>,
    /// The append this connection sent alone and has no answer to yet
    /// ([`crate::append_in_flight`]).
    in_flight: Option<AppendInFlight>,
    /// The vote and log id the peer last confirmed holding, by a real
    /// answer on this connection: what a commit notice may be answered
    /// with without asking (module docs).
    confirmed: Option<(Vote, Option<LogId>)>,
    /// Commit notices in the background; started by the first one.
    notices: Option<NoticeLane>,
    /// Where lanes come from, when this member pipelines.
    pipeline: Option<Pipeline>,
    /// The lane opened at the last confirmed position, if any.
    lane: Option<Lane>,
}

/// The background sender of commit notices of one connection.
#[derive(Debug)]
struct NoticeLane {
    /// The latest notice not yet sent; the sender replaces, never queues.
    /// Dropping it (the connection goes) ends the task.
    latest: watch::Sender<Option<(AppendEntriesRequest, Duration)>>,
    /// A higher vote one of them was answered with, for the next call.
    higher_vote: Arc<Mutex<Option<Vote>>>,
}

impl NoticeLane {
    fn start(link: Arc<Link>) -> Self {
        let (latest, mut pending) = watch::channel(None::<(AppendEntriesRequest, Duration)>);
        let higher_vote = Arc::new(Mutex::new(None));
        let learned = higher_vote.clone();
        tokio::spawn(async move {
            while pending.changed().await.is_ok() {
                let Some((notice, ttl)) = pending.borrow_and_update().clone() else {
                    continue;
                };
                let option = RPCOption::new(ttl);
                let answer = link.append(&notice, &option, None).await;
                match answer {
                    Ok(AppendEntriesResponse::HigherVote(vote)) => {
                        *learned.lock().unwrap_or_else(|p| p.into_inner()) = Some(vote);
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(
                        target = link.target,
                        error = %e,
                        "a commit notice sent in the background failed; the next append meets it too"
                    ),
                }
            }
        });
        Self {
            latest,
            higher_vote,
        }
    }

    fn take_higher_vote(&self) -> Option<Vote> {
        self.higher_vote
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

impl Connection {
    /// Whether `rpc` is a commit notice whose answer is already known: no
    /// entries, and exactly the position the peer last confirmed under
    /// the same vote.
    fn answer_is_known(&self, rpc: &AppendEntriesRequest) -> bool {
        rpc.entries.is_empty()
            && self
                .confirmed
                .as_ref()
                .is_some_and(|(vote, at)| *vote == rpc.vote && *at == rpc.prev_log_id)
    }

    /// Remembers what a real answer to `rpc` confirmed.
    fn remember(
        &mut self,
        rpc_vote: Vote,
        sent_up_to: Option<LogId>,
        answer: &Result<AppendEntriesResponse, RpcError>,
    ) {
        self.confirmed = match answer {
            Ok(AppendEntriesResponse::Success) => Some((rpc_vote, sent_up_to)),
            Ok(AppendEntriesResponse::PartialSuccess(matching)) => Some((rpc_vote, *matching)),
            _ => None,
        };
    }

    /// Waits until `deadline` (openraft's) for the append in flight, and
    /// takes its answer as a real answer on this connection: remembered,
    /// and a lane opened after it. `Timeout` when it is still on its way;
    /// it stays in flight for the next call.
    async fn settle_in_flight(
        &mut self,
        deadline: tokio::time::Instant,
        option: &RPCOption,
    ) -> Result<(AppendInFlight, AppendAnswer), RpcError> {
        // Awaited where it lies: openraft may drop this call at its own
        // timeout, and the append must stay in flight when it does.
        let Some(in_flight) = self.in_flight.as_mut() else {
            unreachable!("settle_in_flight is called with an append in flight");
        };
        let joined = tokio::time::timeout_at(deadline, &mut in_flight.answer)
            .await
            .map_err(|_| {
                self.link
                    .timed_out(RPCTypes::AppendEntries, option.hard_ttl())
            })?;
        let earlier = self.in_flight.take().expect("checked above");
        let answer = joined.unwrap_or_else(|e| Err(RpcError::Network(NetworkError::new(&e))));
        self.remember(earlier.vote, earlier.up_to, &answer);
        self.open_lane();
        Ok((earlier, answer))
    }

    /// Whether appends to this peer go down lanes: this member pipelines
    /// and the peer orders lanes.
    fn pipelines(&self) -> bool {
        self.pipeline.is_some()
            && self
                .link
                .versions
                .of(self.link.target)
                .is_some_and(|v| v >= PIPELINED_SINCE)
    }

    /// Opens a lane at what the peer last confirmed, if it pipelines; as
    /// deep as the peer's distance pays for ([`Pipeline::depth_for`]).
    fn open_lane(&mut self) {
        let (Some(pipeline), Some((vote, at))) = (&self.pipeline, self.confirmed) else {
            return;
        };
        if self.pipelines() {
            let depth = pipeline.depth_for(self.link.round_trip_floor());
            self.lane = Some(pipeline.lane(self.link.clone(), vote, at, depth));
        }
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse, RpcError> {
        let deadline = tokio::time::Instant::now() + option.hard_ttl();
        if self.in_flight.is_some() {
            let (earlier, answer) = self.settle_in_flight(deadline, &option).await?;
            if let Some(known) = earlier.answer_for(&rpc, &answer) {
                return known;
            }
        }
        if let Some(vote) = self.notices.as_ref().and_then(NoticeLane::take_higher_vote) {
            if vote > rpc.vote {
                self.confirmed = None;
                return Ok(AppendEntriesResponse::HigherVote(vote));
            }
        }
        if let Some(lane) = self.lane.take().filter(|lane| lane.vote() == rpc.vote) {
            match lane.answer(&rpc, &option).await {
                LaneAnswer::Held => {
                    if let Some(last) = rpc.entries.last() {
                        self.confirmed = Some((rpc.vote, Some(last.log_id)));
                    }
                    self.lane = Some(lane);
                    return Ok(AppendEntriesResponse::Success);
                }
                LaneAnswer::HigherVote(vote) => {
                    self.confirmed = None;
                    return Ok(AppendEntriesResponse::HigherVote(vote));
                }
                // Its pushes are on their way still: so is the lane.
                LaneAnswer::Pending => {
                    self.lane = Some(lane);
                    return Err(self
                        .link
                        .timed_out(RPCTypes::AppendEntries, option.hard_ttl()));
                }
                // Dropped: its pushes stop; this append goes alone.
                LaneAnswer::Alone => {}
            }
        }
        if self.answer_is_known(&rpc) && !self.pipelines() {
            let link = &self.link;
            let lane = self
                .notices
                .get_or_insert_with(|| NoticeLane::start(link.clone()));
            lane.latest.send_replace(Some((rpc, option.hard_ttl())));
            return Ok(AppendEntriesResponse::Success);
        }
        let link = self.link.clone();
        self.in_flight = Some(AppendInFlight {
            vote: rpc.vote,
            prev: rpc.prev_log_id,
            up_to: append_in_flight::up_to(&rpc),
            answer: tokio::spawn(async move {
                let budget = RPCOption::new(link.append_budget);
                link.append(&rpc, &budget, None).await
            }),
        });
        let (_, answer) = self.settle_in_flight(deadline, &option).await?;
        answer
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse, RpcError<InstallSnapshotError>> {
        self.confirmed = None;
        self.lane = None;
        // An append still on its way finishes alone; its answer is moot.
        self.in_flight = None;
        self.link
            .call(
                SNAPSHOT_PATH,
                RPCTypes::InstallSnapshot,
                &rpc,
                0,
                &option,
                None,
            )
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest,
        option: RPCOption,
    ) -> Result<VoteResponse, RpcError> {
        self.link
            .call(VOTE_PATH, RPCTypes::Vote, &rpc, 0, &option, None)
            .await
    }
}
