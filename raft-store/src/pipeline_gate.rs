//! The follower's side of pipelined replication ([`crate::pipeline`]): a
//! leader's lane sends several appends at once, over as many connections,
//! and they may arrive in any order; raft must see them in the order they
//! were sent, each one's `prev_log_id` being the last entry of the one
//! before.
//!
//! [`LaneGates`] keeps, per sending member, its current lane, the seq it
//! expects next and the appends that arrived early. One driver per sender
//! hands raft the next append together with every later one already
//! there, joined into one append, waits for raft's answer, and goes on with
//! what arrived meanwhile: one log write and one fsync for what openraft
//! 0.9 would otherwise write one after another (its core writes a
//! follower's appends one at a time anyway). Each append gets the joined append's
//! answer: `Success` means the follower holds all of it; a conflict or a
//! higher vote met by the first would have been met by the rest too.
//!
//! A lane with a higher id than the current one replaces it at its first
//! append (seq 0). Appends of a replaced lane, and any that waited
//! [`GATE_WAIT`] for one sent before them, are refused (`409`): the leader
//! then breaks that lane and sends alone.
//!
//! Nothing here decides what raft accepts: the joined append is an
//! ordinary append, checked by openraft like any other.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use tokio::sync::oneshot;

use crate::clock::MEMBER_HEADER;
use crate::pipeline::{LANE_HEADER, LANE_SEQ_HEADER};
use crate::types::{AppendEntriesRequest, AppendEntriesResponse, NodeId, Raft, RaftError};
use crate::wan;

/// The longest an append waits for the appends sent before it.
pub const GATE_WAIT: Duration = Duration::from_secs(1);

/// What raft answered an append.
pub type Answer = Result<AppendEntriesResponse, RaftError>;

/// Each sending member's lanes, as far as this follower has seen them.
#[derive(Debug, Default)]
pub struct LaneGates {
    senders: Mutex<HashMap<NodeId, Sender>>,
}

#[derive(Debug, Default)]
struct Sender {
    /// The lane being handed to raft, and its next seq.
    current: u64,
    next: u64,
    /// Someone is handing this sender's appends to raft right now.
    driving: bool,
    /// Appends waiting for their turn, by lane (the current one, or a
    /// newer one whose first append has not arrived yet) and seq.
    waiting: BTreeMap<(u64, u64), Waiting>,
}

#[derive(Debug)]
struct Waiting {
    rpc: AppendEntriesRequest,
    answer: oneshot::Sender<Answer>,
}

/// A lane's append, as its headers name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    pub sender: NodeId,
    pub lane: u64,
    pub seq: u64,
}

impl Ticket {
    /// The ticket `headers` carry; `None` for an append outside any lane.
    pub fn in_headers(headers: &HeaderMap) -> Option<Self> {
        let number = |name| wan::header(headers, name).and_then(|v| v.parse().ok());
        Some(Self {
            sender: number(MEMBER_HEADER)?,
            lane: number(LANE_HEADER)?,
            seq: number(LANE_SEQ_HEADER)?,
        })
    }
}

/// Why an append was not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("lane_superseded: a newer lane of this leader replaced it")]
    Superseded,
    #[error("lane_gap: the appends sent before this one did not arrive in time")]
    Gap,
}

/// Where the gate hands appends: raft, or a stand-in in tests.
pub trait Appender: Clone + Send + Sync + 'static {
    fn append(&self, rpc: AppendEntriesRequest) -> impl Future<Output = Answer> + Send + 'static;
}

impl Appender for Raft {
    fn append(&self, rpc: AppendEntriesRequest) -> impl Future<Output = Answer> + Send + 'static {
        let raft = self.clone();
        async move { raft.append_entries(rpc).await }
    }
}

impl LaneGates {
    /// Hands `rpc` to `raft` in its lane's order; its answer, or why it
    /// was refused.
    pub async fn append<A: Appender>(
        self: &Arc<Self>,
        raft: &A,
        ticket: Ticket,
        rpc: AppendEntriesRequest,
    ) -> Result<Answer, Refused> {
        let (answer, answered) = oneshot::channel();
        {
            let mut senders = self.lock();
            let sender = senders.entry(ticket.sender).or_default();
            if ticket.lane < sender.current
                || (ticket.lane == sender.current && ticket.seq < sender.next)
            {
                return Err(Refused::Superseded);
            }
            if ticket.lane > sender.current && ticket.seq == 0 {
                // A newer lane: what waits for older ones is refused
                // (their answer senders dropped).
                sender.current = ticket.lane;
                sender.next = 0;
                sender.waiting.retain(|(lane, _), _| *lane >= ticket.lane);
            }
            sender
                .waiting
                .insert((ticket.lane, ticket.seq), Waiting { rpc, answer });
        }
        self.drive(raft, ticket.sender);
        let mut answered = std::pin::pin!(answered);
        match tokio::time::timeout(GATE_WAIT, answered.as_mut()).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(Refused::Superseded),
            Err(_) => {
                // Still waiting: its predecessor never came. Taken already:
                // raft has it, and its answer is coming.
                let removed = self
                    .lock()
                    .get_mut(&ticket.sender)
                    .and_then(|s| s.waiting.remove(&(ticket.lane, ticket.seq)))
                    .is_some();
                if removed {
                    return Err(Refused::Gap);
                }
                answered.await.map_err(|_| Refused::Superseded)
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Sender>> {
        self.senders.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Unless a driver is at it already, starts one for `sender`: a task
    /// that hands raft the appends due, joined into one, waits for raft's
    /// answer, and goes on with those that arrived meanwhile until none is
    /// due. A task, so that no handler's cancellation can stall the lane.
    fn drive<A: Appender>(self: &Arc<Self>, raft: &A, sender: NodeId) {
        {
            let mut senders = self.lock();
            let Some(s) = senders.get_mut(&sender) else {
                return;
            };
            if s.driving || !s.waiting.contains_key(&(s.current, s.next)) {
                return;
            }
            s.driving = true;
        }
        let (gates, raft) = (self.clone(), raft.clone());
        tokio::spawn(async move {
            loop {
                let due = {
                    let mut senders = gates.lock();
                    let Some(s) = senders.get_mut(&sender) else {
                        return;
                    };
                    let due = s.take_due();
                    s.driving = !due.is_empty();
                    due
                };
                if due.is_empty() {
                    return;
                }
                let (rpc, answers) = join(due);
                let answer = raft.append(rpc).await;
                send_all(answers, &answer);
            }
        });
    }
}

impl Sender {
    /// The current lane's appends that follow on from `next` without a gap.
    fn take_due(&mut self) -> Vec<Waiting> {
        let mut due = Vec::new();
        while let Some(waiting) = self.waiting.remove(&(self.current, self.next)) {
            self.next += 1;
            due.push(waiting);
        }
        due
    }
}

/// One append of `due`'s entries, each continuing the one before, and
/// who waits for its answer. A lane's appends always continue each other;
/// one that did not would start a second append, never be joined.
fn join(due: Vec<Waiting>) -> (AppendEntriesRequest, Vec<oneshot::Sender<Answer>>) {
    let mut due = due.into_iter();
    let first = due.next().expect("joined appends are never none");
    let mut joined = first.rpc;
    let mut answers = vec![first.answer];
    for next in due {
        let continues = next.rpc.vote == joined.vote
            && next.rpc.prev_log_id
                == joined
                    .entries
                    .last()
                    .map(|e| e.log_id)
                    .or(joined.prev_log_id);
        if !continues {
            // Never sent by a leader; refused rather than guessed at.
            drop(next.answer);
            continue;
        }
        joined.entries.extend(next.rpc.entries);
        joined.leader_commit = joined.leader_commit.max(next.rpc.leader_commit);
        answers.push(next.answer);
    }
    (joined, answers)
}

fn send_all(answers: Vec<oneshot::Sender<Answer>>, answer: &Answer) {
    for sender in answers {
        let copy = match answer {
            Ok(AppendEntriesResponse::Success) => Ok(AppendEntriesResponse::Success),
            Ok(AppendEntriesResponse::Conflict) => Ok(AppendEntriesResponse::Conflict),
            Ok(AppendEntriesResponse::HigherVote(v)) => Ok(AppendEntriesResponse::HigherVote(*v)),
            Ok(AppendEntriesResponse::PartialSuccess(m)) => {
                Ok(AppendEntriesResponse::PartialSuccess(*m))
            }
            Err(e) => Err(e.clone()),
        };
        let _ = sender.send(copy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    use crate::types::{Entry, LogId, Vote};

    /// What reached raft: the `prev_log_id` and entries of one append, as indexes.
    type Received = (Option<u64>, Vec<u64>);

    /// Records what reached raft; answers `Success` once `open` says so.
    #[derive(Clone)]
    struct Recorder {
        seen: Arc<Mutex<Vec<Received>>>,
        open: tokio::sync::watch::Receiver<bool>,
    }

    impl Appender for Recorder {
        fn append(
            &self,
            rpc: AppendEntriesRequest,
        ) -> impl Future<Output = Answer> + Send + 'static {
            self.seen.lock().unwrap().push((
                rpc.prev_log_id.map(|l| l.index),
                rpc.entries.iter().map(|e| e.log_id.index).collect(),
            ));
            let mut open = self.open.clone();
            async move {
                open.wait_for(|o| *o).await.unwrap();
                Ok(AppendEntriesResponse::Success)
            }
        }
    }

    fn recorder(open: bool) -> (Recorder, tokio::sync::watch::Sender<bool>) {
        let (tx, rx) = tokio::sync::watch::channel(open);
        (
            Recorder {
                seen: Arc::default(),
                open: rx,
            },
            tx,
        )
    }

    fn ticket(lane: u64, seq: u64) -> Ticket {
        Ticket {
            sender: 1,
            lane,
            seq,
        }
    }

    /// Send `seq` of a lane: entry `seq + 1` after entry `seq`.
    fn append_no(seq: u64) -> AppendEntriesRequest {
        let id = |i| LogId::new(CommittedLeaderId::new(1, 1), i);
        AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: Some(id(seq)),
            leader_commit: None,
            entries: vec![Entry {
                log_id: id(seq + 1),
                payload: openraft::EntryPayload::Blank,
            }],
        }
    }

    #[tokio::test]
    async fn appends_that_arrive_out_of_order_reach_raft_in_order_joined_while_they_wait() {
        let gates = Arc::new(LaneGates::default());
        let (raft, open) = recorder(false);
        let mut tasks = Vec::new();
        // 3, 1, 2 arrive before 0 and wait; with 0, all four go to raft
        // as one append.
        for seq in [3, 1, 2, 0] {
            let (gates, raft) = (gates.clone(), raft.clone());
            tasks.push(tokio::spawn(async move {
                gates.append(&raft, ticket(7, seq), append_no(seq)).await
            }));
            tokio::task::yield_now().await;
        }
        let seen = raft.seen.clone();
        once_test_support::wait::until(
            "raft has the first append",
            Duration::from_secs(5),
            || async { seen.lock().unwrap().len() == 1 },
        )
        .await;
        open.send(true).unwrap();
        for task in tasks {
            assert_eq!(
                task.await.unwrap().unwrap(),
                Ok(AppendEntriesResponse::Success)
            );
        }
        assert_eq!(
            *raft.seen.lock().unwrap(),
            vec![(Some(0), vec![1, 2, 3, 4])]
        );
    }

    #[tokio::test]
    async fn a_newer_lane_replaces_the_current_one_and_the_old_ones_appends_are_refused() {
        let gates = Arc::new(LaneGates::default());
        let (raft, _open) = recorder(true);
        gates
            .append(&raft, ticket(7, 0), append_no(0))
            .await
            .unwrap()
            .unwrap();
        gates
            .append(&raft, ticket(8, 0), append_no(1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            gates.append(&raft, ticket(7, 1), append_no(1)).await,
            Err(Refused::Superseded)
        );
        gates
            .append(&raft, ticket(8, 1), append_no(2))
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn an_append_whose_predecessor_never_comes_is_refused_after_the_wait() {
        let gates = Arc::new(LaneGates::default());
        let (raft, _open) = recorder(true);
        gates
            .append(&raft, ticket(7, 0), append_no(0))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            gates.append(&raft, ticket(7, 2), append_no(2)).await,
            Err(Refused::Gap)
        );
        assert_eq!(raft.seen.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn appends_that_arrive_while_raft_writes_the_one_before_are_joined_into_the_next() {
        let gates = Arc::new(LaneGates::default());
        let (raft, open) = recorder(false);
        let send = |seq| {
            let (gates, raft) = (gates.clone(), raft.clone());
            tokio::spawn(async move { gates.append(&raft, ticket(7, seq), append_no(seq)).await })
        };
        let first = send(0);
        let seen = raft.seen.clone();
        once_test_support::wait::until(
            "raft has the first append",
            Duration::from_secs(5),
            || async { seen.lock().unwrap().len() == 1 },
        )
        .await;
        let (second, third) = (send(1), send(2));
        once_test_support::wait::until(
            "the next two wait at the gate",
            Duration::from_secs(5),
            || async { gates.lock()[&1].waiting.len() == 2 },
        )
        .await;
        assert_eq!(seen.lock().unwrap().len(), 1, "raft still writes the first");
        open.send(true).unwrap();
        for task in [first, second, third] {
            assert_eq!(
                task.await.unwrap().unwrap(),
                Ok(AppendEntriesResponse::Success)
            );
        }
        assert_eq!(
            *seen.lock().unwrap(),
            vec![(Some(0), vec![1]), (Some(1), vec![2, 3])]
        );
    }
}
