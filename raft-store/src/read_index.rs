//! Linearizable reads by read-index, coalesced: concurrent readers share one
//! leadership check (one heartbeat round to a quorum) and one wait for the
//! state machine to apply up to the read index. A reader that arrives while
//! a check is running waits for the next one — it must, since the running
//! check may have started before the reader's write was acknowledged.

use tokio::sync::{mpsc, oneshot};

use crate::protocol::Answer;
use crate::types::{CheckIsLeaderError, Raft, RaftError};

type Waiter = oneshot::Sender<Answer<()>>;

#[derive(Debug, Clone)]
pub struct ReadIndex {
    queue: mpsc::Sender<Waiter>,
}

impl ReadIndex {
    pub fn start(raft: Raft) -> Self {
        let (queue, rx) = mpsc::channel(4096);
        tokio::spawn(run(raft, rx));
        Self { queue }
    }

    /// Returns once this member's state machine reflects every write
    /// committed before the call (or says who the leader is).
    pub async fn barrier(&self) -> Answer<()> {
        let (tx, rx) = oneshot::channel();
        if self.queue.send(tx).await.is_err() {
            return Answer::Unavailable("shutting down".into());
        }
        rx.await
            .unwrap_or_else(|_| Answer::Unavailable("read dropped".into()))
    }
}

async fn run(raft: Raft, mut rx: mpsc::Receiver<Waiter>) {
    while let Some(first) = rx.recv().await {
        let mut waiters = vec![first];
        while let Ok(w) = rx.try_recv() {
            waiters.push(w);
        }
        let answer = match raft.ensure_linearizable().await {
            Ok(_) => Answer::Done(()),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                Answer::ForwardToLeader {
                    leader: f.leader_id,
                }
            }
            Err(e) => Answer::Unavailable(e.to_string()),
        };
        for w in waiters {
            let _ = w.send(answer.clone());
        }
    }
}
