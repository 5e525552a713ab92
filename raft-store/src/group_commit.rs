//! Group commit: client requests queue here and leave as one raft entry
//! each batch, so many claims share one log append, one replication round
//! trip and one fsync per member.
//!
//! The queue drains greedily: the first request starts a batch, and every
//! request already queued joins it (up to `max_batch`). While up to
//! `max_inflight` batches are being committed, new requests accumulate, so
//! batches grow with load and a lone request is never held back by a timer.
//!
//! A member that knows no leader, or has not heard its leader for two
//! heartbeats (an election is under way or about to be), holds a batch
//! until another leader is known, up to the lease ([`Hold`]), and then
//! proposes it if it won or sends it to the winner: the caller's next
//! attempt goes straight there instead of bouncing between a dead leader
//! and its followers, a backoff and a round trip per member asked
//! (decision 0067: after a region dies, the router's failover write landed
//! 150–240 ms after the new leader's first commit).
//!
//! The leader stamps each batch with its time ([`crate::clock`]) just
//! before proposing it: every request's `now` is overwritten, so no
//! caller's clock ever decides a lease or an expiry. A leader whose clock a
//! majority of the voters disagrees with proposes nothing and answers
//! `Unavailable`, and the client retries elsewhere.

use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::clock::ClockGuard;
use crate::tasks::{GroupTasks, Lifetime};

use crate::command::{Batch, ClientRequest};
use crate::protocol::WriteAnswer;
use crate::types::{ClientWriteError, NodeId, Raft, RaftError, RaftMetrics};

type Waiter = (ClientRequest, oneshot::Sender<WriteAnswer>);

/// The producer side; cheap to clone.
#[derive(Debug, Clone)]
pub struct GroupCommit {
    queue: mpsc::Sender<Waiter>,
}

impl GroupCommit {
    /// Starts the batching loop, owned by `tasks`.
    pub fn start(
        tasks: &GroupTasks,
        raft: Raft,
        clock: Arc<ClockGuard>,
        max_batch: usize,
        max_inflight: usize,
        hold: Hold,
    ) -> Self {
        let (queue, rx) = mpsc::channel(max_batch * max_inflight * 4);
        tasks.spawn(
            "group commit",
            Lifetime::Group,
            run(raft, clock, rx, max_batch, max_inflight, hold),
        );
        Self { queue }
    }

    /// Proposes `request` in the next batch and waits for its reply.
    pub async fn submit(&self, request: ClientRequest) -> WriteAnswer {
        let (tx, rx) = oneshot::channel();
        if self.queue.send((request, tx)).await.is_err() {
            return WriteAnswer::Unavailable("shutting down".into());
        }
        rx.await
            .unwrap_or_else(|_| WriteAnswer::Unavailable("write dropped".into()))
    }
}

async fn run(
    raft: Raft,
    clock: Arc<ClockGuard>,
    mut rx: mpsc::Receiver<Waiter>,
    max_batch: usize,
    max_inflight: usize,
    hold: Hold,
) {
    let slots = Arc::new(Semaphore::new(max_inflight));
    while let Some(first) = rx.recv().await {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        // Everything that queued while we waited for a slot joins the batch.
        let mut waiters = vec![first];
        while waiters.len() < max_batch {
            match rx.try_recv() {
                Ok(w) => waiters.push(w),
                Err(_) => break,
            }
        }
        let (raft, clock) = (raft.clone(), clock.clone());
        tokio::spawn(async move {
            let (mut requests, senders): (Vec<_>, Vec<_>) = waiters.into_iter().unzip();
            // Only a leader proposes, and it stamps its time on every
            // request; a follower sends the caller to the leader.
            let (leads, leader) = leadership(&raft, hold).await;
            let stamped = if leads {
                clock
                    .stamp_now()
                    .await
                    .map_err(|e| WriteAnswer::Unavailable(e.to_string()))
            } else {
                Err(WriteAnswer::ForwardToLeader { leader })
            };
            match stamped {
                Ok(now) => requests.iter_mut().for_each(|r| r.now = now),
                Err(answer) => {
                    drop(permit);
                    for tx in senders {
                        let _ = tx.send(answer.clone());
                    }
                    return;
                }
            }
            let result = raft.client_write(Batch { requests }).await;
            drop(permit);
            match result {
                Ok(response) => {
                    for (tx, reply) in senders.into_iter().zip(response.data.replies) {
                        let _ = tx.send(WriteAnswer::Done(reply));
                    }
                }
                Err(e) => {
                    let answer = write_error(e);
                    for tx in senders {
                        let _ = tx.send(answer.clone());
                    }
                }
            }
        });
    }
}

/// How long a member without a leader it hears holds a batch.
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    /// At most this long (the lease: an election is decided within it).
    pub upto: Duration,
    /// A leader not heard for this long (two heartbeats) is taken for gone.
    pub silent_after: Duration,
}

/// Whether this member leads, and whom it knows as the leader; while that
/// is none, or one it has not heard for `hold.silent_after`, after waiting
/// up to `hold.upto` for another.
async fn leadership(raft: &Raft, hold: Hold) -> (bool, Option<NodeId>) {
    let of = |m: &RaftMetrics| (m.state == ServerState::Leader, m.current_leader);
    let (leads, leader) = of(&raft.metrics().borrow());
    if leads {
        return (leads, leader);
    }
    if leader.is_some() {
        let silent_for = raft
            .with_raft_state(|st| st.vote_last_modified().map(|t| t.elapsed()))
            .await
            .ok()
            .flatten();
        if silent_for.is_none_or(|s| s < hold.silent_after) {
            return (leads, leader);
        }
    }
    match raft
        .wait(Some(hold.upto))
        .metrics(
            |m| {
                m.state == ServerState::Leader
                    || m.current_leader.is_some_and(|l| Some(l) != leader)
            },
            "another leader",
        )
        .await
    {
        Ok(m) => of(&m),
        // None within the hold (or the core stopped): the caller backs off.
        Err(_) => of(&raft.metrics().borrow()),
    }
}

fn write_error(e: RaftError<ClientWriteError>) -> WriteAnswer {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => WriteAnswer::ForwardToLeader {
            leader: f.leader_id,
        },
        other => WriteAnswer::Unavailable(other.to_string()),
    }
}
