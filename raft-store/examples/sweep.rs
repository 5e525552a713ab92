//! How long one sweep takes on a state machine of N finished records: an
//! `Expire` batch when nothing is due, and one when a batch is due, applied
//! through openraft's `RaftStateMachine::apply` on a real redb file.
//!
//!     cargo run --release -p once-raft-store --example sweep -- 200000
//!
//! Prints one JSON line per measurement (`BENCHMARKS.md`, expiry index).

use std::time::Instant;

use once_raft_store::command::{Op, Reply};
use once_raft_store::state_machine::StateMachine;

// Shared with the snapshot example and tests, which use the rest of it.
#[allow(dead_code)]
mod common;
use common::{Applier, DAY, T0};

#[tokio::main]
async fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut a = Applier::new(StateMachine::open(&dir.path().join("sm.redb")).expect("open"));
    // N records claimed and completed; the first batch's windows end an
    // hour early, so exactly 1,000 are due at T0 + 23 h.
    a.fill(n, |start| if start == 0 { DAY - 3_600_000 } else { DAY })
        .await;
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
