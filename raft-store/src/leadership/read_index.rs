//! Linearizable reads by read index, coalesced: concurrent readers share one
//! leadership check (one round of appends to a quorum) and one wait for the
//! state machine. A reader that arrives while a check is running waits for
//! the next one — it must, since the running check may have started before
//! the reader's write was acknowledged.
//!
//! The check is raft-store's own, not openraft's `ensure_linearizable`
//! (RELIABILITY.md, finding 4): openraft 0.9 gives its round exactly one
//! heartbeat interval, on connections made for it, so on a machine where a
//! quorum's answers take longer than a heartbeat every read failed while
//! writes committed. This one gives the round the append budget
//! (`election_max`, decision 0070), the time an append may take anyway:
//!
//! 1. **This member leads, and has applied an entry of its own term.** From
//!    its metrics: the state is `Leader`, and the last applied entry is of
//!    the leader's own vote. Every write committed by an earlier leader
//!    comes before that entry in the log, so it is applied; every write this
//!    leader acknowledged was applied before its answer. Until an entry of
//!    its term is applied (just after an election) the check waits, within
//!    the budget.
//! 2. **A majority of every voter configuration still takes its vote**,
//!    asked after the reader arrived: an empty append under the leader's
//!    vote, from the follower's matching position, with no commit index (it
//!    commits nothing), to every other voter. An answer that is not a higher
//!    vote means the follower held no newer vote when it answered. A leader
//!    of a newer term needs a majority's votes, and any two majorities
//!    share a member; so if a newer leader had been elected before the
//!    reader arrived, one of the answers would have been its higher vote.
//!    With none, no write newer than this member's state machine had been
//!    acknowledged when the reader arrived, and the read is linearizable.
//!
//! A higher vote, or no majority within the budget, answers `Unavailable`
//! (the client tries again, on the leader it finds then); a member that does
//! not lead answers `ForwardToLeader` with its best guess.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::ServerState;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::leadership::quorum;
use crate::network::Network;
use crate::protocol::Answer;
use crate::tasks::{GroupTasks, Lifetime};
use crate::types::{AppendEntriesRequest, AppendEntriesResponse, LogId, Node, NodeId, Raft, Vote};

type Waiter = oneshot::Sender<Answer<()>>;

#[derive(Debug, Clone)]
pub struct ReadIndex {
    queue: mpsc::Sender<Waiter>,
}

impl ReadIndex {
    /// Checks leadership through `network`, each round within its append
    /// budget, in a loop owned by `tasks`.
    pub fn start(tasks: &GroupTasks, raft: Raft, network: Network) -> Self {
        let (queue, rx) = mpsc::channel(4096);
        let budget = network.append_budget();
        let leadership = Leadership {
            raft,
            network,
            budget,
        };
        tasks.spawn("read index", Lifetime::Group, run(leadership, rx));
        Self { queue }
    }

    /// Returns once this member's state machine reflects every write
    /// acknowledged before the call (or says who the leader is).
    pub async fn barrier(&self) -> Answer<()> {
        let (tx, rx) = oneshot::channel();
        if self.queue.send(tx).await.is_err() {
            return Answer::Unavailable("shutting down".into());
        }
        rx.await
            .unwrap_or_else(|_| Answer::Unavailable("read dropped".into()))
    }
}

async fn run(mut leadership: Leadership, mut rx: mpsc::Receiver<Waiter>) {
    while let Some(first) = rx.recv().await {
        let mut waiters = vec![first];
        while let Ok(w) = rx.try_recv() {
            waiters.push(w);
        }
        let answer = leadership.confirm().await;
        for w in waiters {
            let _ = w.send(answer.clone());
        }
    }
}

/// What one leadership check needs.
struct Leadership {
    raft: Raft,
    network: Network,
    budget: Duration,
}

/// What the leader's metrics said when its check started.
struct Leading {
    me: NodeId,
    vote: Vote,
    /// Every voter configuration (two during a joint change).
    configs: Vec<BTreeSet<NodeId>>,
    /// The other voters, and where each matches the leader's log.
    others: Vec<(NodeId, Node, Option<LogId>)>,
}

impl Leadership {
    /// Steps 1 and 2 of the module docs, within the budget.
    async fn confirm(&mut self) -> Answer<()> {
        let deadline = Instant::now() + self.budget;
        let leading = match self.leading(deadline).await {
            Ok(leading) => leading,
            Err(answer) => return answer,
        };
        self.quorum_takes(leading, deadline).await
    }

    /// Step 1: this member leads and has applied an entry of its term.
    async fn leading(&self, deadline: Instant) -> Result<Leading, Answer<()>> {
        let mut metrics = self.raft.metrics();
        loop {
            {
                let m = metrics.borrow_and_update();
                if m.state != ServerState::Leader || m.current_leader != Some(m.id) {
                    return Err(Answer::ForwardToLeader {
                        leader: m.current_leader,
                    });
                }
                let own_term_applied = m
                    .last_applied
                    .is_some_and(|applied| &applied.leader_id == m.vote.leader_id());
                if own_term_applied {
                    let (configs, others) = quorum::voters_but(&m, m.id);
                    let matching = m.replication.clone().unwrap_or_default();
                    let others = others
                        .into_iter()
                        .map(|(peer, node)| (peer, node, matched(&matching, peer)))
                        .collect();
                    return Ok(Leading {
                        me: m.id,
                        vote: m.vote,
                        configs,
                        others,
                    });
                }
            }
            match tokio::time::timeout_at(deadline, metrics.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Answer::Unavailable("shutting down".into())),
                Err(_) => {
                    return Err(Answer::Unavailable(
                        "the leader has not applied an entry of its term yet".into(),
                    ));
                }
            }
        }
    }

    /// Step 2: a majority of every voter configuration takes `leading`'s
    /// vote, asked now.
    async fn quorum_takes(&mut self, leading: Leading, deadline: Instant) -> Answer<()> {
        let mut asks = tokio::task::JoinSet::new();
        for (peer, node, matching) in leading.others {
            let network = self.network.clone();
            let budget = self.budget;
            let probe = AppendEntriesRequest {
                vote: leading.vote,
                prev_log_id: matching,
                leader_commit: None,
                entries: Vec::new(),
            };
            asks.spawn(async move {
                let answer = network.probe(peer, &node, &probe, budget).await;
                (peer, answer)
            });
        }
        let mut took = BTreeSet::from([leading.me]);
        let agreed = |took: &BTreeSet<NodeId>| quorum::majority_of_every(&leading.configs, took);
        // Decided at the majority's last answer: a dead or cut-off voter's
        // silence is not waited out (the set's drop aborts its question).
        while !agreed(&took) {
            let next = match tokio::time::timeout_at(deadline, asks.join_next()).await {
                Ok(Some(Ok(next))) => next,
                Ok(Some(Err(_))) => continue,
                Ok(None) | Err(_) => break,
            };
            match next {
                (peer, Ok(AppendEntriesResponse::HigherVote(vote))) => {
                    return Answer::Unavailable(format!(
                        "member {peer} holds a newer vote ({vote}): this member no longer leads"
                    ));
                }
                (peer, Ok(_)) => {
                    took.insert(peer);
                }
                (peer, Err(e)) => {
                    tracing::debug!(peer, error = %e, "leadership check not answered");
                }
            }
        }
        if agreed(&took) {
            Answer::Done(())
        } else {
            Answer::Unavailable(format!(
                "not enough for a quorum: {took:?} took this leader's vote within {:?}, of {:?}",
                self.budget, leading.configs
            ))
        }
    }
}

/// Where `peer` matches the leader's log, as the leader's metrics say.
fn matched(matching: &BTreeMap<NodeId, Option<LogId>>, peer: NodeId) -> Option<LogId> {
    matching.get(&peer).copied().flatten()
}
