//! Pipelined replication: several appends in flight to one follower, where
//! openraft 0.9 keeps one (docs/decisions/0052-pipelined-appends.md).
//!
//! openraft's replication stream to a follower sends one append-entries
//! RPC and waits for its answer before the next, and the leader appends to
//! its own log (an fsync) before it replicates at all. Under load a write
//! therefore waits for the round trip in flight, then its own: about two
//! round trips across regions, and two fsyncs in a row on one machine.
//!
//! A [`Lane`] sends ahead. It listens to the leader's log
//! ([`crate::log_store::LogStore::appends`]) and pushes each batch to the
//! follower as an append of its own the moment the batch reaches the log,
//! before the leader's fsync, without waiting for the pushes before it
//! (up to [`MAX_IN_FLIGHT`]). When openraft then asks for those entries,
//! the connection answers from the lane's acknowledgements instead of
//! sending them again.
//!
//! Why that answer is true. Each send of a lane carries the lane's id and
//! a sequence number ([`LANE_HEADER`], [`LANE_SEQ_HEADER`]); the follower
//! hands a lane's appends to raft strictly in that order
//! ([`crate::pipeline_gate`]). Every send's `prev_log_id` is the last
//! entry of the send before it, and the lane's first send starts where the
//! follower last confirmed by a real answer under the lane's vote. So when
//! sends `0..=n` have all succeeded, the follower holds the leader's log up
//! to the end of send `n` under that vote: exactly what a `Success` to
//! openraft's own append would say. The lane answers only that way; any
//! send that fails breaks the lane, and openraft's append then goes alone,
//! as before, and gets the real answer — a conflict, a higher vote, an
//! unreachable peer — from the follower itself.
//!
//! The lane ends with its connection (openraft drops it when the
//! replication stream ends: a new term, a removed member) and is replaced
//! whenever the vote changes or the follower's position is not the lane's.
//! A follower that does not order lanes (wire version below
//! [`PIPELINED_SINCE`]) is never sent one. One nearer than
//! `--pipeline-from-rtt` (5 ms, by the shortest round trip lately) gets a
//! lane one send deep ([`Pipeline::depth_for`]): within a region a request
//! and a follower log write per batch cost more than the wait behind the
//! append in flight, but a batch sent while the lane is idle still saves a
//! lone caller the leader's fsync before replication.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::sync::{broadcast, watch};

use crate::append_in_flight;
use crate::link::Link;
use crate::log_store::AppendedBatch;
use crate::types::{AppendEntriesRequest, AppendEntriesResponse, LogId, RpcError, Vote};
use openraft::network::RPCOption;

pub use crate::link::{LANE_HEADER, LANE_SEQ_HEADER};
/// The first wire version whose members order a lane's appends.
pub const PIPELINED_SINCE: u16 = 3;
/// Pushes in flight per lane; a batch that finds the lane full waits for
/// openraft's own append, which carries it.
pub const MAX_IN_FLIGHT: usize = 32;

/// Where lanes come from: the leader's log, and lane ids that grow within
/// a process (a follower takes a lane with a higher id as the newer).
#[derive(Debug, Clone)]
pub struct Pipeline {
    appends: broadcast::Sender<AppendedBatch>,
    next_id: Arc<AtomicU64>,
    metrics: PipelineMetrics,
    from: Duration,
}

/// What the lanes of this member did, for `/metrics`. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct PipelineMetrics {
    /// openraft appends answered from a lane, without sending them.
    pub answered: Counter,
    /// Batches pushed to a follower as the log received them.
    pub pushed: Counter,
    /// Lanes that ended on a failed send or a wait that ran out.
    pub broken: Counter,
}

impl PipelineMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "raft_pipeline_answered_appends",
            "Appends openraft asked for that a lane had already delivered, answered without sending",
            self.answered.clone(),
        );
        registry.register(
            "raft_pipeline_pushed_batches",
            "Batches pushed to a follower as the leader's log received them",
            self.pushed.clone(),
        );
        registry.register(
            "raft_pipeline_broken_lanes",
            "Lanes ended by a failed send or an answer that did not come in time",
            self.broken.clone(),
        );
    }
}

impl Pipeline {
    /// Lanes from `appends`: [`MAX_IN_FLIGHT`] deep to followers whose
    /// round trip is at least `from`, one deep to the others
    /// ([`Pipeline::depth_for`]).
    pub fn new(appends: broadcast::Sender<AppendedBatch>, from: Duration) -> Self {
        // Start above any id an earlier process of this member used, by
        // its wall clock; were the clock to go back, a follower would
        // refuse this process's lanes as stale and replication would only
        // go unpipelined, never wrong.
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros() as u64;
        Self {
            appends,
            next_id: Arc::new(AtomicU64::new(epoch << 8)),
            metrics: PipelineMetrics::default(),
            from,
        }
    }

    /// How many sends a lane to a follower `round_trip` away keeps in
    /// flight. Across regions (at least `from`), [`MAX_IN_FLIGHT`]: a write
    /// would otherwise wait a whole round trip behind the append in flight.
    /// Within one, a single send: a batch goes out the moment it reaches the
    /// leader's log when nothing else is on its way, so the follower's fsync
    /// overlaps the leader's (what a lone caller waits for); under load the
    /// batches that queue meanwhile go together in openraft's next append,
    /// as without a lane, rather than a request and a log write each.
    pub fn depth_for(&self, round_trip: Option<Duration>) -> usize {
        if round_trip.is_some_and(|rtt| rtt >= self.from) {
            MAX_IN_FLIGHT
        } else {
            1
        }
    }

    pub fn metrics(&self) -> PipelineMetrics {
        self.metrics.clone()
    }

    /// A lane to `link`'s follower under `vote`, whose log the follower is
    /// known to hold up to `confirmed`.
    /// `depth` sends at most are in flight at once ([`Pipeline::depth_for`]).
    pub(crate) fn lane(
        &self,
        link: Arc<Link>,
        vote: Vote,
        confirmed: Option<LogId>,
        depth: usize,
    ) -> Lane {
        let shared = Arc::new(Shared {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            vote,
            link,
            depth,
            state: Mutex::new(State {
                next_seq: 0,
                tail: confirmed,
                acked: confirmed,
                acked_seq: 0,
                done: BTreeMap::new(),
                in_flight: 0,
                broken: None,
                committed: None,
            }),
            changed: watch::channel(0).0,
            metrics: self.metrics.clone(),
        });
        let feeder = tokio::spawn(feed(Arc::downgrade(&shared), self.appends.subscribe()));
        Lane { shared, feeder }
    }
}

/// One follower's lane under one vote. Dropping it stops its pushes; those
/// already sent finish on their own.
#[derive(Debug)]
pub(crate) struct Lane {
    shared: Arc<Shared>,
    feeder: tokio::task::JoinHandle<()>,
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.feeder.abort();
    }
}

/// What [`Lane::answer`] made of openraft's append.
#[derive(Debug)]
pub(crate) enum LaneAnswer {
    /// The follower holds every entry of the append: `Success`.
    Held,
    /// A push met a higher vote: the leader must step down.
    HigherVote(Vote),
    /// The lane cannot answer (its position is not the append's, or it
    /// broke): send the append alone and start a new lane after.
    Alone,
    /// The sends that carry the append are still on their way after
    /// openraft's wait: openraft is told `Timeout`, the lane goes on, and
    /// openraft's next append asks it again.
    Pending,
}

#[derive(Debug)]
struct Shared {
    id: u64,
    vote: Vote,
    link: Arc<Link>,
    /// Most sends in flight: [`MAX_IN_FLIGHT`] across regions, one within.
    depth: usize,
    state: Mutex<State>,
    /// Bumped whenever `acked` or `broken` changes.
    changed: watch::Sender<u64>,
    metrics: PipelineMetrics,
}

#[derive(Debug)]
struct State {
    next_seq: u64,
    /// The last entry sent on the lane: the next send's `prev_log_id`.
    tail: Option<LogId>,
    /// The follower holds the leader's log up to here: every send below
    /// `acked_seq` succeeded.
    acked: Option<LogId>,
    acked_seq: u64,
    /// Sends that succeeded ahead of one still in flight, by seq: what
    /// each confirmed.
    done: BTreeMap<u64, Option<LogId>>,
    in_flight: usize,
    broken: Option<Broken>,
    /// The commit index openraft last told this follower; pushes carry it.
    committed: Option<LogId>,
}

#[derive(Debug, Clone, Copy)]
enum Broken {
    HigherVote(Vote),
    Failed,
}

fn index(id: &Option<LogId>) -> Option<u64> {
    id.as_ref().map(|l| l.index)
}

impl Lane {
    pub(crate) fn vote(&self) -> Vote {
        self.shared.vote
    }

    /// Answers openraft's `rpc` from the lane: at once when the follower
    /// already holds its entries, after the sends that carry them when
    /// they are on their way, and after sending the part the lane has not
    /// sent yet when `rpc` starts inside the lane.
    pub(crate) async fn answer(
        &self,
        rpc: &AppendEntriesRequest,
        option: &RPCOption,
    ) -> LaneAnswer {
        let last = append_in_flight::up_to(rpc);
        {
            let mut state = self.shared.lock();
            if let Some(broken) = state.broken {
                return broken.into();
            }
            state.committed = rpc.leader_commit;
            if index(&rpc.prev_log_id) > index(&state.tail) {
                // The follower's position is past what the lane sent (a
                // snapshot, a lagging lane): the lane cannot vouch for it.
                return LaneAnswer::Alone;
            }
            if index(&last) > index(&state.tail) {
                // The rest of the append, after what the lane sent.
                let after = index(&state.tail).map_or(0, |i| i + 1);
                let entries: Vec<_> = rpc
                    .entries
                    .iter()
                    .filter(|e| e.log_id.index >= after)
                    .cloned()
                    .collect();
                let rest = AppendEntriesRequest {
                    vote: rpc.vote,
                    prev_log_id: state.tail,
                    leader_commit: rpc.leader_commit,
                    entries,
                };
                self.shared.send(&mut state, rest);
            } else if rpc.entries.is_empty() {
                // A heartbeat or a commit notice at a position the lane
                // has passed: its news (the commit index) goes down the
                // lane, behind the entries it commits; its answer is known
                // once the follower holds that position.
                let notice = AppendEntriesRequest {
                    vote: rpc.vote,
                    prev_log_id: state.tail,
                    leader_commit: rpc.leader_commit,
                    entries: Vec::new(),
                };
                if state.in_flight < self.shared.depth {
                    self.shared.send(&mut state, notice);
                }
            }
        }
        let answer = self.shared.held(index(&last), option.hard_ttl()).await;
        if matches!(answer, LaneAnswer::Held) {
            self.shared.metrics.answered.inc();
        }
        answer
    }
}

impl From<Broken> for LaneAnswer {
    fn from(broken: Broken) -> Self {
        match broken {
            Broken::HigherVote(v) => LaneAnswer::HigherVote(v),
            Broken::Failed => LaneAnswer::Alone,
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `rpc` as the lane's next append, in the background.
    fn send(self: &Arc<Self>, state: &mut State, rpc: AppendEntriesRequest) {
        let seq = state.next_seq;
        state.next_seq += 1;
        state.in_flight += 1;
        let last = append_in_flight::up_to(&rpc);
        state.tail = last;
        // A send runs to its answer within the append budget, however long
        // openraft waits for it (crate::append_in_flight).
        let option = RPCOption::new(self.link.append_budget);
        let shared = self.clone();
        tokio::spawn(async move {
            let answer = shared
                .link
                .append(&rpc, &option, Some((shared.id, seq)))
                .await;
            shared.settle(seq, last, answer);
        });
    }

    /// Records the answer to send `seq`, which carried entries up to `last`.
    fn settle(
        &self,
        seq: u64,
        last: Option<LogId>,
        answer: Result<AppendEntriesResponse, RpcError>,
    ) {
        let mut state = self.lock();
        state.in_flight -= 1;
        let was_broken = state.broken.is_some();
        match answer {
            Ok(AppendEntriesResponse::Success) if state.broken.is_none() => {
                state.done.insert(seq, last);
                loop {
                    let next = state.acked_seq;
                    let Some(confirmed) = state.done.remove(&next) else {
                        break;
                    };
                    state.acked_seq += 1;
                    if index(&confirmed) > index(&state.acked) {
                        state.acked = confirmed;
                    }
                }
            }
            Ok(AppendEntriesResponse::Success) => {}
            Ok(AppendEntriesResponse::HigherVote(vote)) => {
                state.broken = Some(Broken::HigherVote(vote));
            }
            Ok(other) => {
                tracing::debug!(target = self.link.target(), seq, answer = %other, "a pipelined append failed; the lane ends");
                state.broken.get_or_insert(Broken::Failed);
            }
            Err(e) => {
                tracing::debug!(target = self.link.target(), seq, error = %e, "a pipelined append failed; the lane ends");
                state.broken.get_or_insert(Broken::Failed);
            }
        }
        if !was_broken && state.broken.is_some() {
            self.metrics.broken.inc();
        }
        drop(state);
        self.changed.send_modify(|v| *v += 1);
    }

    /// Waits until the follower holds the leader's log up to `last`, the
    /// lane breaks, or `ttl` passes (`Pending`: the lane goes on).
    async fn held(&self, last: Option<u64>, ttl: Duration) -> LaneAnswer {
        let mut changed = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + ttl;
        loop {
            {
                let state = self.lock();
                if let Some(broken) = state.broken {
                    return broken.into();
                }
                if index(&state.acked) >= last {
                    return LaneAnswer::Held;
                }
            }
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                return LaneAnswer::Pending;
            }
        }
    }

    /// Pushes `batch` down the lane if it continues what the lane sent.
    fn push(self: &Arc<Self>, batch: &AppendedBatch) {
        let Some(first) = batch.first() else { return };
        // Only this leadership's own entries: a batch of another leader's
        // (this member following again) is not ours to send.
        if first.log_id.leader_id != *self.vote.leader_id() {
            return;
        }
        let mut state = self.lock();
        if state.broken.is_some()
            || state.in_flight >= self.depth
            || Some(first.log_id.index) != index(&state.tail).map(|i| i + 1)
        {
            return;
        }
        let rpc = AppendEntriesRequest {
            vote: self.vote,
            prev_log_id: state.tail,
            leader_commit: state.committed,
            entries: batch.to_vec(),
        };
        self.send(&mut state, rpc);
        self.metrics.pushed.inc();
    }
}

/// Pushes every batch the leader appends down the lane while it lives.
async fn feed(lane: Weak<Shared>, mut appends: broadcast::Receiver<AppendedBatch>) {
    loop {
        let batch = match appends.recv().await {
            Ok(batch) => batch,
            // Missed batches leave a gap the lane will not push across;
            // openraft's next append fills it.
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let Some(lane) = lane.upgrade() else { return };
        lane.push(&batch);
    }
}
