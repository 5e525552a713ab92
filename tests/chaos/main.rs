//! `once drill chaos` against `once up` (three regions, real child
//! processes): two minutes, a fixed seed, every nemesis. A test binary of
//! its own, so it runs after the `api` tests rather than beside them: the
//! run measures the cluster's faults, not the test suite's. The run finds no
//! violation — every invariant of the failover drill holds and the history
//! the clients saw is linearizable — and every nemesis is shown to take
//! effect where it acts: a paused process in state `T`, a skewed process
//! reporting its offset, a partitioned member refusing the cut region, a
//! killed process dead, a rolled-out process replaced, a wiped member blank
//! before it is added back. A fifth of the load re-sends remembered
//! payments (the idempotence workload), and both kinds are counted.

use std::time::Duration;

use once_test_support::ports::port_outside_ephemeral_range;
use once_test_support::process::{self, Process};
use tokio::process::Command;

const ONCE: &str = env!("CARGO_BIN_EXE_once");

/// `once up --dir data` in `root`, waited for until it says it is up.
async fn once_up(root: &std::path::Path, listen: &str) -> Process {
    let mut command = process::command(ONCE);
    command
        .args(["up", "--regions", "3", "--listen", listen, "--dir", "data"])
        // Its store members are under a millisecond apart: pipeline
        // anyway, so the nemeses strike replication through lanes.
        .env("ONCE_STORE_PIPELINE_FROM_RTT", "0s")
        .current_dir(root);
    let (process, ()) = Process::start(command, "once up", Duration::from_secs(120), |line| {
        line.starts_with("once is up:").then_some(())
    })
    .await;
    process
}

/// The seed CI runs; a failure names it, and the command in the report
/// repeats the schedule.
const SEED: &str = "20261202";

/// The notes the report must show for each nemesis: what proves it acted.
const SEEN: &[(&str, &str)] = &[
    ("kill", "state Z"),
    ("pause", "state T"),
    ("partition", "503 X-Once-Partitioned"),
    ("skew", "reports its clock"),
    ("restart", "→"),
    ("membership", "blank"),
    ("leader", "state Z"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_minutes_of_every_nemesis_break_no_invariant_and_the_history_is_linearizable() {
    let root = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", port_outside_ephemeral_range(&["127.0.0.1"]));
    let up = once_up(root.path(), &listen).await;
    let cluster = root.path().join("data").join("cluster.json");
    let out = root.path().join("chaos");
    let run = tokio::time::timeout(
        Duration::from_secs(900),
        Command::new(ONCE)
            .args(["drill", "chaos", "--duration", "120", "--rate", "8"])
            .args(["--seed", SEED])
            // The idempotence workload: a fifth of the ticks re-send a
            // remembered payment, same body or another, through another
            // region's node.
            .args(["--resend-share", "0.2"])
            .arg("--cluster")
            .arg(&cluster)
            .arg("--out")
            .arg(&out)
            .env("RUST_LOG", "warn")
            .output(),
    )
    .await
    .expect("the chaos run ends")
    .expect("run the chaos drill");
    let report_md = std::fs::read_to_string(out.join("report.md")).unwrap_or_default();
    assert!(
        run.status.success(),
        "chaos drill: {}\n{report_md}",
        String::from_utf8_lossy(&run.stderr),
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["seed"], SEED.parse::<u64>().unwrap());
    assert_eq!(report["invariants_held"], true, "{report_md}");
    // The verdict counts what the run saw: every fault took effect and
    // every tenant is home again at its end.
    assert_eq!(report["passed"], true, "{}: {report_md}", report["verdict"]);
    assert_eq!(report["verdict"], "no violation", "{report_md}");
    assert_eq!(
        report["homecoming"]["left_away"],
        serde_json::json!([]),
        "{report_md}"
    );
    for check in report["checks"].as_array().unwrap() {
        assert_eq!(check["passed"], true, "{check}");
    }
    let lin = &report["linearizability"];
    assert!(lin["violations"].as_array().unwrap().is_empty(), "{lin}");
    assert!(lin["keys"].as_u64().unwrap() > 100, "{lin}");

    // Both kinds of resend were sent and judged, some answered by another
    // region than their original (the `idempotent resends` check above
    // passed with them).
    let resends = &report["resends"];
    for kind in [
        "same_body_answered",
        "other_body_answered",
        "answered_by_another_region",
    ] {
        assert!(resends[kind].as_u64().unwrap() > 0, "{kind}: {resends}");
    }
    assert_eq!(resends["violations"], 0, "{resends}");
    assert!(
        report_md.contains("same-body resends"),
        "the headline paragraph counts the resends"
    );

    let faults = report["faults"].as_array().unwrap();
    for (nemesis, proof) in SEEN {
        let of_kind: Vec<&serde_json::Value> =
            faults.iter().filter(|f| f["nemesis"] == *nemesis).collect();
        assert!(!of_kind.is_empty(), "{nemesis} never struck:\n{report_md}");
        let shown = of_kind.iter().any(|f| {
            f["took_effect"] == true
                && f["seen"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|n| n["what"].as_str().unwrap().contains(proof))
        });
        assert!(
            shown,
            "{nemesis} not seen taking effect ({proof}):\n{report_md}"
        );
    }
    for fault in faults {
        assert!(fault["healed_at"].is_number(), "{fault}");
        assert!(
            fault["recovered_at"].is_number(),
            "healthy again after {fault}"
        );
    }
    // The charts shade each fault.
    let svg = std::fs::read_to_string(out.join("throughput.svg")).unwrap();
    for (nemesis, _) in SEEN {
        assert!(svg.contains(nemesis), "throughput.svg marks {nemesis}");
    }
    drop(up);
}
