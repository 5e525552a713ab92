//! What a snapshot of N records costs: time, file size and peak memory to
//! build one and to install it on a fresh member, each phase in its own
//! process so each peak is its own. The install copies the file into the
//! receiver in 4 MiB chunks, as openraft's chunked transport does.
//!
//!     cargo run --release -p once-raft-store --example snapshot -- fill DIR N
//!     cargo run --release -p once-raft-store --example snapshot -- build DIR
//!     cargo run --release -p once-raft-store --example snapshot -- install DIR DEST
//!
//! `bench/snapshot.sh` runs the three; each prints one JSON line
//! (`BENCHMARKS.md`, snapshots).

use std::path::Path;
use std::time::Instant;

use once_raft_store::protocol::RecordQuery;
use once_raft_store::state_machine::StateMachine;
use openraft::RaftSnapshotBuilder;
use openraft::storage::RaftStateMachine;
use tokio::io::AsyncSeekExt;

mod common;
use common::{Applier, DAY, scope, send_in_chunks};

const CHUNK: usize = 4 << 20;

/// Peak resident memory of this process so far, in MiB (`VmHWM`).
fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

fn bytes_under(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => bytes_under(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

fn open(dir: &Path) -> StateMachine {
    std::fs::create_dir_all(dir).expect("dir");
    StateMachine::open(&dir.join("state.redb")).expect("open")
}

fn records(sm: &StateMachine) -> u64 {
    sm.count(&RecordQuery::default()).expect("count")
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| -> &str {
        args.get(i)
            .map(String::as_str)
            .expect("usage: see the docs")
    };
    let started = Instant::now();
    let line = match arg(0) {
        "fill" => {
            let dir = Path::new(arg(1));
            let n: u64 = arg(2).parse().expect("N");
            let mut a = Applier::new(open(dir));
            a.fill(n, |_| DAY).await;
            format!(
                "\"phase\":\"fill\",\"records\":{n},\"state_bytes\":{}",
                bytes_under(dir)
            )
        }
        "build" => {
            let mut sm = open(Path::new(arg(1)));
            let mut snapshot = sm.build_snapshot().await.expect("build");
            let bytes = snapshot
                .snapshot
                .seek(std::io::SeekFrom::End(0))
                .await
                .expect("seek");
            format!("\"phase\":\"build\",\"snapshot_bytes\":{bytes}")
        }
        "install" => {
            let mut from = open(Path::new(arg(1)));
            let mut to = open(Path::new(arg(2)));
            let mut snapshot = from
                .get_current_snapshot()
                .await
                .expect("read")
                .expect("no snapshot built: run build first");
            let (received, bytes) = send_in_chunks(&mut snapshot, &mut to, CHUNK).await;
            to.install_snapshot(&snapshot.meta, received)
                .await
                .expect("install");
            let (elapsed, peak) = (started.elapsed(), peak_rss_mib());
            // Checked after the clock and the peak are read: the copy holds
            // what the original does.
            let (n, m) = (records(&from), records(&to));
            assert_eq!(n, m, "records before and after the install");
            for k in [0, n.saturating_sub(1)] {
                assert_eq!(
                    from.record(&scope(k)).expect("read"),
                    to.record(&scope(k)).expect("read"),
                );
            }
            println!(
                "{{\"phase\":\"install\",\"records\":{m},\"snapshot_bytes\":{bytes},\"ms\":{},\"peak_rss_mib\":{}}}",
                elapsed.as_millis(),
                peak
            );
            return;
        }
        other => panic!("unknown phase {other}: fill, build or install"),
    };
    println!(
        "{{{line},\"ms\":{},\"peak_rss_mib\":{}}}",
        started.elapsed().as_millis(),
        peak_rss_mib()
    );
}
