//! One peer of the Raft RPC: where its listener is, and sending one RPC
//! to it over HTTP with postcard bodies — the simulated WAN's wait and
//! partitions, the clock and wire-version headers both ways, the error
//! mapping openraft relies on ([`crate::network`] tabulates it), and the
//! shortest round trip to the peer lately, which decides whether a lane
//! pays ([`crate::pipeline`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{NetworkError, PayloadTooLarge, RemoteError, Timeout, Unreachable};
use openraft::network::{RPCOption, RPCTypes};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::clock::{CLOCK_HEADER, ClockGuard, MEMBER_HEADER, QUORUM_HEADER, Sample};
use crate::types::{AppendEntriesRequest, AppendEntriesResponse, NodeId, RaftError, RpcError};
use crate::wan::{self, REGION_HEADER, SimulatedWan};
use crate::wire;
use crate::wire_versions::WireVersions;

/// Paths of the Raft RPC listener.
pub const APPEND_PATH: &str = "/raft/append";
pub const VOTE_PATH: &str = "/raft/vote";
pub const SNAPSHOT_PATH: &str = "/raft/snapshot";
/// Whether a member has ever been part of a cluster (bootstrap asks).
pub const INITIALIZED_PATH: &str = "/raft/initialized";
/// Start an election now: how a leader hands the lead to the preferred
/// member ([`crate::housekeeping`]).
pub const CAMPAIGN_PATH: &str = "/raft/campaign";
/// Would you vote for me? ([`crate::leadership::election`]).
pub const PREVOTE_PATH: &str = "/raft/prevote";

/// The lane a pipelined append belongs to ([`crate::pipeline`]).
pub const LANE_HEADER: &str = "x-once-lane";
/// Its place in the lane, from 0.
pub const LANE_SEQ_HEADER: &str = "x-once-lane-seq";
/// The group an RPC is meant for (the directory's name for the directory):
/// a member refuses one that reaches another of its groups
/// ([`crate::raft_service`]).
pub const GROUP_HEADER: &str = "x-once-raft-group";

/// A peer that does not serve a path (`404`): a build before it existed.
#[derive(Debug, thiserror::Error)]
#[error("{NOT_SERVED} {0}")]
struct NotServed(String);

const NOT_SERVED: &str = "the peer does not serve";

/// Whether `error` says the peer does not serve the path at all.
pub(crate) fn is_not_served<E: std::error::Error>(error: &RpcError<E>) -> bool {
    matches!(error, RpcError::Network(e) if e.to_string().contains(NOT_SERVED))
}

/// Where and how RPCs to one peer go; shared by a connection, its
/// background notice sender and its lane.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) id: NodeId,
    pub(crate) target: NodeId,
    /// The group this link's RPCs belong to ([`GROUP_HEADER`]).
    pub(crate) group: Arc<str>,
    pub(crate) base: String,
    pub(crate) http: reqwest::Client,
    pub(crate) max_body: usize,
    pub(crate) wan: Arc<SimulatedWan>,
    pub(crate) clock: Arc<ClockGuard>,
    pub(crate) versions: Arc<WireVersions>,
    pub(crate) round_trips: Mutex<RoundTrips>,
    /// How long one append may take before the peer counts as not
    /// answering ([`crate::append_in_flight`]).
    pub(crate) append_budget: Duration,
}

/// The shortest round trip to a peer lately: the minimum of the current
/// window and of the one before (windows of [`RoundTrips::WINDOW`]), the
/// simulated WAN's wait included.
#[derive(Debug, Default)]
pub(crate) struct RoundTrips {
    started: Option<std::time::Instant>,
    current: Option<Duration>,
    previous: Option<Duration>,
}

impl RoundTrips {
    const WINDOW: Duration = Duration::from_secs(10);

    fn record(&mut self, round_trip: Duration) {
        let now = std::time::Instant::now();
        if self
            .started
            .is_none_or(|s| now.duration_since(s) >= Self::WINDOW)
        {
            self.started = Some(now);
            self.previous = self.current.take();
        }
        self.current = Some(self.current.map_or(round_trip, |c| c.min(round_trip)));
    }

    fn floor(&self) -> Option<Duration> {
        match (self.current, self.previous) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl Link {
    pub(crate) fn target(&self) -> NodeId {
        self.target
    }

    /// The shortest round trip to the peer lately ([`RoundTrips`]).
    pub(crate) fn round_trip_floor(&self) -> Option<Duration> {
        self.round_trips
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .floor()
    }

    /// Records the peer's clock from its answer: read somewhere between
    /// `sent_at` and now, so good to half the round trip.
    fn read_clock(&self, sent_at: std::time::Instant, headers: &reqwest::header::HeaderMap) {
        let Some(peer_clock) = headers
            .get(CLOCK_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
        else {
            return;
        };
        let round_trip = sent_at.elapsed();
        self.clock.record(
            self.target,
            Sample {
                peer_clock,
                at: sent_at + round_trip / 2,
                uncertainty: round_trip / 2,
                vouched: None,
            },
        );
    }

    /// The error of an RPC not answered within `timeout`.
    pub(crate) fn timed_out<E: std::error::Error>(
        &self,
        action: RPCTypes,
        timeout: Duration,
    ) -> RpcError<E> {
        RpcError::Timeout(Timeout {
            action,
            id: self.id,
            target: self.target,
            timeout,
        })
    }

    /// The error of an RPC the partition did not let through.
    fn partitioned<E: std::error::Error>(&self, by: &str) -> RpcError<E> {
        let e = std::io::Error::other(format!(
            "partitioned: {by} (member {} to member {})",
            self.id, self.target
        ));
        RpcError::Unreachable(Unreachable::new(&e))
    }

    /// Sends one append-entries RPC (entries, a heartbeat or a commit
    /// notice); as send `seq` of lane `lane` given one.
    pub(crate) async fn append(
        &self,
        rpc: &AppendEntriesRequest,
        option: &RPCOption,
        lane: Option<(u64, u64)>,
    ) -> Result<AppendEntriesResponse, RpcError> {
        let entries = rpc.entries.len() as u64;
        self.call(
            APPEND_PATH,
            RPCTypes::AppendEntries,
            rpc,
            entries,
            option,
            lane,
        )
        .await
    }

    /// Sends one RPC and decodes its answer; as send `seq` of lane `lane`
    /// given one ([`crate::pipeline`]).
    pub(crate) async fn call<Req, Resp, E>(
        &self,
        path: &str,
        action: RPCTypes,
        request: &Req,
        entries: u64,
        option: &RPCOption,
        lane: Option<(u64, u64)>,
    ) -> Result<Resp, RpcError<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body = wire::encode(request).map_err(|e| RpcError::Network(NetworkError::new(&e)))?;
        if body.len() > self.max_body && entries > 1 {
            return Err(RpcError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint((entries / 2).max(1)),
            ));
        }
        // The simulated WAN: cut off, or one round trip away. Checked again
        // after the wait, as a link cut while the packet was on its way.
        if !self.wan.may_send_to(self.target) {
            return Err(self.partitioned("this member is isolated or the peer's region is cut"));
        }
        let delay = self.wan.delay_to(self.target);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
            if !self.wan.may_send_to(self.target) {
                return Err(self.partitioned("this member is isolated or the peer's region is cut"));
            }
        }
        // The simulated round trip is part of the RPC's time budget.
        let timeout = option
            .hard_ttl()
            .saturating_sub(delay)
            .max(Duration::from_millis(1));
        let sent_at = std::time::Instant::now();
        let mut post = self.http.post(format!("{}{path}", self.base));
        if let Some((lane, seq)) = lane {
            post = post.header(LANE_HEADER, lane).header(LANE_SEQ_HEADER, seq);
        }
        let sent = post
            .header(reqwest::header::CONTENT_TYPE, wire::CONTENT_TYPE)
            .header(REGION_HEADER, self.wan.region())
            .header(MEMBER_HEADER, self.id)
            .header(GROUP_HEADER, &*self.group)
            .header(QUORUM_HEADER, if self.clock.vouches() { "1" } else { "0" })
            .header(CLOCK_HEADER, self.clock.now())
            .header(wire::VERSION_HEADER, self.versions.speaks())
            .timeout(timeout)
            .body(body)
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) if e.is_timeout() => return Err(self.timed_out(action, timeout)),
            Err(e) if e.is_connect() => return Err(RpcError::Unreachable(Unreachable::new(&e))),
            Err(e) => return Err(RpcError::Network(NetworkError::new(&e))),
        };
        self.read_clock(sent_at, response.headers());
        self.round_trips
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(delay + sent_at.elapsed());
        self.versions.heard_in(self.target, response.headers());
        let status = response.status();
        if wan::is_partition_refusal(status.as_u16(), response.headers()) {
            return Err(self.partitioned("the peer is cut off from this region"));
        }
        if status == reqwest::StatusCode::PAYLOAD_TOO_LARGE && entries > 1 {
            return Err(RpcError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint((entries / 2).max(1)),
            ));
        }
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(RpcError::Network(NetworkError::new(&NotServed(
                path.to_owned(),
            ))));
        }
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            let e = std::io::Error::other(format!("{path} answered {status}: {text}"));
            return Err(RpcError::Network(NetworkError::new(&e)));
        }
        let bytes = response.bytes().await.map_err(|e| {
            if e.is_timeout() {
                self.timed_out(action, timeout)
            } else {
                RpcError::Network(NetworkError::new(&e))
            }
        })?;
        let answer: Result<Resp, RaftError<E>> =
            wire::decode(&bytes).map_err(|e| RpcError::Network(NetworkError::new(&e)))?;
        answer.map_err(|e| RpcError::RemoteError(RemoteError::new(self.target, e)))
    }
}
