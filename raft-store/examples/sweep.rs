//! How long one sweep takes on a state machine of N finished records: an
//! `Expire` batch when nothing is due, and one when a batch is due, applied
//! through openraft's `RaftStateMachine::apply` on a real redb file.
//!
//!     cargo run --release -p once-raft-store --example sweep -- 200000
//!
//! Prints one JSON line per measurement (`BENCHMARKS.md`, expiry index).

use std::time::Instant;

use once_raft_store::command::{
    Batch, BusinessKey, ClientRequest, NewClaim, Op, Reply, Scope, Sealed, Step,
};
use once_raft_store::state_machine::StateMachine;
use once_raft_store::types::{Entry, LogId};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload};

const T0: i64 = 1_700_000_000_000;
const DAY: i64 = 86_400_000;

struct Applier {
    sm: StateMachine,
    index: u64,
    seq: u64,
}

impl Applier {
    async fn apply(&mut self, now: i64, ops: Vec<Op>) -> Vec<Reply> {
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
}

fn scope(n: u64) -> Scope {
    Scope {
        tenant: format!("tenant-{}", n % 100),
        principal: "checkout".into(),
        operation: "payments.create".into(),
        key: format!("key-{n:012}"),
    }
}

#[tokio::main]
async fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut a = Applier {
        sm: StateMachine::open(&dir.path().join("sm.redb")).expect("open"),
        index: 0,
        seq: 0,
    };
    // N records claimed and completed, 1,000 per entry; the first batch's
    // windows end an hour early, so exactly 1,000 are due at T0 + 23 h.
    for start in (0..n).step_by(1_000) {
        let keys: Vec<u64> = (start..(start + 1_000).min(n)).collect();
        let claims = keys
            .iter()
            .map(|k| {
                Op::Claim(NewClaim {
                    scope: scope(*k),
                    fingerprint_version: 1,
                    fingerprint: "f".into(),
                    business_key: Some(BusinessKey {
                        tenant: scope(*k).tenant,
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
                })
            })
            .collect();
        a.apply(T0, claims).await;
        let window = if start == 0 { DAY - 3_600_000 } else { DAY };
        let completes = keys
            .iter()
            .map(|k| Op::Complete {
                scope: scope(*k),
                fence: 1,
                response: Sealed(vec![b'x'; 260]),
                expires_after_ms: window,
            })
            .collect();
        a.apply(T0, completes).await;
    }
    for (what, now) in [
        ("nothing due", T0 + 60_000),
        ("1000 due", T0 + 23 * 3_600_000),
    ] {
        let started = Instant::now();
        let replies = a
            .apply(
                now,
                vec![Op::Expire {
                    limit: 1_000,
                    retention_ms: DAY,
                }],
            )
            .await;
        let elapsed = started.elapsed();
        let Some(Reply::Count(expired)) = replies.first() else {
            panic!("{replies:?}");
        };
        println!(
            "{{\"records\":{n},\"sweep\":\"{what}\",\"expired\":{expired},\"ms\":{:.2}}}",
            elapsed.as_secs_f64() * 1000.0
        );
    }
}
