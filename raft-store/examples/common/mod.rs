//! What the raft-store examples and snapshot tests share: a state machine filled with N
//! finished payment records through openraft's `RaftStateMachine::apply`,
//! as a leader would apply them (1,000 requests per entry), and a snapshot
//! copied into another state machine as openraft's transport does.

use once_raft_store::command::{
    Batch, BusinessKey, ClientRequest, NewClaim, Op, Reply, Scope, Sealed, Step,
};
use once_raft_store::state_machine::StateMachine;
use once_raft_store::types::{Entry, LogId, Snapshot, TypeConfig};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload, RaftTypeConfig};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

pub const T0: i64 = 1_700_000_000_000;
pub const DAY: i64 = 86_400_000;

/// Applies batches of ops as consecutive log entries of one leader.
pub struct Applier {
    pub sm: StateMachine,
    index: u64,
    seq: u64,
}

impl Applier {
    pub fn new(sm: StateMachine) -> Self {
        Self {
            sm,
            index: 0,
            seq: 0,
        }
    }

    pub async fn apply(&mut self, now: i64, ops: Vec<Op>) -> Vec<Reply> {
        self.index += 1;
        let requests = ops
            .into_iter()
            .map(|op| {
                self.seq += 1;
                ClientRequest {
                    client: 1,
                    seq: self.seq,
                    acked_below: self.seq,
                    now,
                    op,
                }
            })
            .collect();
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), self.index),
            payload: EntryPayload::Normal(Batch { requests }),
        };
        let mut replies = self.sm.apply(vec![entry]).await.expect("apply");
        replies.pop().expect("one entry").replies
    }

    /// Claims and completes records `0..n` at `T0`, 1,000 per entry: a
    /// payment with a business key, a 64-byte sealed payload and a 260-byte
    /// sealed answer each, as `POST /payments` leaves them. `window` gives
    /// each batch's replay window by its first record's number.
    pub async fn fill(&mut self, n: u64, window: impl Fn(u64) -> i64) {
        for start in (0..n).step_by(1_000) {
            let keys: Vec<u64> = (start..(start + 1_000).min(n)).collect();
            let claims = keys.iter().map(|k| Op::Claim(new_claim(*k))).collect();
            self.apply(T0, claims).await;
            let completes = keys
                .iter()
                .map(|k| Op::Complete {
                    scope: scope(*k),
                    fence: 1,
                    response: Sealed(vec![b'x'; 260]),
                    expires_after_ms: window(start),
                })
                .collect();
            self.apply(T0, completes).await;
        }
    }
}

pub fn scope(n: u64) -> Scope {
    Scope {
        tenant: format!("tenant-{}", n % 100),
        principal: "checkout".into(),
        operation: "payments.create".into(),
        key: format!("key-{n:012}"),
    }
}

fn new_claim(k: u64) -> NewClaim {
    NewClaim {
        scope: scope(k),
        fingerprint_version: 1,
        fingerprint: "f".into(),
        business_key: Some(BusinessKey {
            tenant: scope(k).tenant,
            account_id: "acc".into(),
            merchant_reference: format!("ref-{k}"),
        }),
        payment_id: Some(format!("pay_{k:032x}")),
        provider_key: None,
        step: Step::ProviderRequestSent,
        payload: Some(Sealed(vec![0; 64])),
        trace_id: None,
        region: "eu".into(),
        epoch: 0,
        lease_ms: 10_000,
    }
}

/// What a state machine receives a snapshot into.
pub type Received = Box<<TypeConfig as RaftTypeConfig>::SnapshotData>;

/// Copies `snapshot` into `to` as openraft's chunked transport does: from
/// its start, each chunk written at its offset, then shut down. Returns
/// what `to` received, ready to install, and its size in bytes.
pub async fn send_in_chunks(
    snapshot: &mut Snapshot,
    to: &mut StateMachine,
    chunk: usize,
) -> (Received, u64) {
    let from = &mut snapshot.snapshot;
    from.seek(std::io::SeekFrom::Start(0)).await.expect("seek");
    let mut received = to.begin_receiving_snapshot().await.expect("begin");
    let mut buf = vec![0u8; chunk];
    let mut offset = 0;
    loop {
        let n = from.read(&mut buf).await.expect("read chunk");
        if n == 0 {
            break;
        }
        received
            .seek(std::io::SeekFrom::Start(offset))
            .await
            .expect("seek");
        received.write_all(&buf[..n]).await.expect("write chunk");
        offset += n as u64;
    }
    received.shutdown().await.expect("flush");
    (received, offset)
}
