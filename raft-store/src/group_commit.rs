//! Group commit: client requests queue here and leave as one raft entry
//! each batch, so many claims share one log append, one replication round
//! trip and one fsync per member.
//!
//! The queue drains greedily: the first request starts a batch, and every
//! request already queued joins it (up to `max_batch`). While up to
//! `max_inflight` batches are being committed, new requests accumulate, so
//! batches grow with load and a lone request is never held back by a timer.

use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::command::{Batch, ClientRequest};
use crate::protocol::WriteAnswer;
use crate::types::{ClientWriteError, Raft, RaftError};

type Waiter = (ClientRequest, oneshot::Sender<WriteAnswer>);

/// The producer side; cheap to clone.
#[derive(Debug, Clone)]
pub struct GroupCommit {
    queue: mpsc::Sender<Waiter>,
}

impl GroupCommit {
    pub fn start(raft: Raft, max_batch: usize, max_inflight: usize) -> Self {
        let (queue, rx) = mpsc::channel(max_batch * max_inflight * 4);
        tokio::spawn(run(raft, rx, max_batch, max_inflight));
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

async fn run(raft: Raft, mut rx: mpsc::Receiver<Waiter>, max_batch: usize, max_inflight: usize) {
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
        let raft = raft.clone();
        tokio::spawn(async move {
            let (requests, senders): (Vec<_>, Vec<_>) = waiters.into_iter().unzip();
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

fn write_error(e: RaftError<ClientWriteError>) -> WriteAnswer {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => WriteAnswer::ForwardToLeader {
            leader: f.leader_id,
        },
        other => WriteAnswer::Unavailable(other.to_string()),
    }
}
