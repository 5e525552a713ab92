//! `once up` with three regions as real child processes, and `once drill
//! failover --failback` against it: the drill finds zero violations in
//! partition and kill mode (the killed region restarted through `once up`'s
//! control endpoint, then failed back), the control endpoint restarts one
//! process at a time (`restarts`), the cluster stops cleanly on SIGTERM
//! and resumes from its data, and a `once up` killed outright leaves no child
//! running. `once up` is given a relative `--dir` and the
//! drill runs from another directory, so every path in `cluster.json` must
//! be absolute (or the drill cannot read the evidence, and fails).

use std::path::{Path, PathBuf};
use std::time::Duration;

use once_test_support::ports::port_outside_ephemeral_range;
use once_test_support::process::{self, Process, alive};
use tokio::process::Command;

use crate::helpers::{Answer, ONCE, eventually, payment_body, post, send};

mod operator;
mod perimeter;
mod restarts;
mod wan;

/// A running `once up`, its cluster description read back (also what
/// `monitoring.rs` scrapes).
pub(crate) struct Up {
    pub(crate) process: Process,
    pub(crate) cluster: serde_json::Value,
    /// The cluster's directory (`root/data`), its logs in `logs/`.
    pub(crate) dir: PathBuf,
}

/// Where `once up` keeps its cluster, relative to the directory it runs in.
const DATA_DIR: &str = "data";

impl Up {
    /// `once up --dir data` started in `root`; the cluster is `root/data`.
    pub(crate) async fn start(root: &Path, listen: &str) -> Self {
        Self::start_with(root, listen, &[]).await
    }

    /// [`Self::start`] with `extra` flags for `once up`.
    pub(crate) async fn start_with(root: &Path, listen: &str, extra: &[&str]) -> Self {
        let mut command = process::command(ONCE);
        command
            .args([
                "up",
                "--regions",
                "3",
                "--listen",
                listen,
                "--dir",
                DATA_DIR,
            ])
            .args(extra)
            .current_dir(root);
        let (process, ()) = Process::start(command, "once up", Duration::from_secs(120), |line| {
            line.starts_with("once is up:").then_some(())
        })
        .await;
        let cluster = serde_json::from_slice(
            &std::fs::read(root.join(DATA_DIR).join("cluster.json")).unwrap(),
        )
        .expect("cluster.json");
        Self {
            process,
            cluster,
            dir: root.join(DATA_DIR),
        }
    }

    /// SIGTERM, and the clean stop's exit status. A stop slower than a
    /// clean one may be prints the end of every child's log first, which
    /// names the process that held it up.
    pub(crate) async fn stop(mut self) -> std::process::ExitStatus {
        if let Some(status) = self.process.try_terminate().await {
            return status;
        }
        let logs = self.dir.join("logs");
        for entry in std::fs::read_dir(&logs).unwrap().flatten() {
            let log = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!("--- the last lines of {}:", entry.path().display());
            for line in &lines[lines.len().saturating_sub(15)..] {
                eprintln!("{line}");
            }
        }
        panic!("once up did not stop within a clean stop's time of SIGTERM");
    }
}

/// `once up`'s operator certificate, as `cluster` names it: what the tests
/// present to the store members (every internal link is mutual TLS).
pub(crate) fn operator_tls(cluster: &serde_json::Value) -> once_tls::Tls {
    let tls = &cluster["tls"];
    let path = |v: &serde_json::Value| std::path::PathBuf::from(v.as_str().expect("a path"));
    once_tls::Tls::load(&once_tls::TlsFiles {
        ca: path(&tls["ca"]),
        cert: path(&tls["operator"]["cert"]),
        key: path(&tls["operator"]["key"]),
    })
    .expect("once up's operator certificate")
}

/// An HTTP client for every URL of `cluster`: plain ones, and the store
/// members' `https://` ones with the operator's certificate.
pub(crate) fn cluster_http(cluster: &serde_json::Value) -> reqwest::Client {
    operator_tls(cluster).http_client().build().unwrap()
}

/// The pid of every child `once up` runs now, as `dir/cluster.json` says:
/// read again each time, since restarting a killed region rewrites it with
/// the new processes' pids.
fn pids_now(dir: &Path) -> Vec<i32> {
    let cluster: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).unwrap()).unwrap();
    let regions = cluster["regions"].as_array().unwrap();
    regions
        .iter()
        .flat_map(|r| [&r["node"]["pid"], &r["store"]["pid"]])
        .chain([&cluster["router"]["pid"]])
        .map(|p| p.as_i64().expect("pid") as i32)
        .collect()
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

async fn drill(cluster: &Path, region: &str, mode: &str, out: &Path) -> std::process::Output {
    Command::new(ONCE)
        .args([
            "drill",
            "failover",
            "--region",
            region,
            "--mode",
            mode,
            "--failback",
        ])
        .args(["--duration", "9", "--rate", "8", "--grace", "30"])
        .arg("--cluster")
        .arg(cluster)
        .arg("--out")
        .arg(out)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("run the drill")
}

/// Runs the drill on `region` in `mode`: it exits 0, the fault was really
/// injected and every invariant held.
async fn drill_holds(dir: &Path, region: &str, mode: &str) {
    let out = dir.join(format!("drill-{mode}"));
    let report = drill(&dir.join("cluster.json"), region, mode, &out).await;
    assert!(
        report.status.success(),
        "drill: {}\n{}",
        String::from_utf8_lossy(&report.stderr),
        std::fs::read_to_string(out.join("report.md")).unwrap_or_default()
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["fault"]["injected"], true, "{json}");
    assert_eq!(json["invariants_held"], true);
    assert!(
        json["failback"]["home_again_at"].is_number(),
        "the region's tenants are served at home again: {}",
        json["failback"]
    );
    // The pictures: both charts mark the fault, the failback and the
    // detection and recovery spans the report measured (a span exists only
    // when some affected tenant's request failed after the fault, which a
    // fast failover between two of the drill's requests can spare them all),
    // in their files and inline in the page.
    let measured = |span: &str| json["measurements"][span].is_number();
    let mut markers = vec!["fault", "failback requested", "home again"];
    if measured("max_detection_ms") {
        markers.push("detection (max)");
    }
    if measured("max_recovery_ms") {
        markers.push("recovery (max)");
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    for chart in ["throughput.svg", "latency.svg"] {
        let svg = std::fs::read_to_string(out.join(chart)).unwrap();
        for marker in &markers {
            assert!(svg.contains(marker), "{chart} marks {marker}");
        }
        assert!(html.contains(svg.trim()), "report.html inlines {chart}");
    }
}

/// The console's state, as the page reads it, with the admin token.
async fn console_state(cluster: &serde_json::Value) -> serde_json::Value {
    let admin = cluster["router"]["admin_url"].as_str().unwrap();
    let token = cluster["admin_tokens"]["router"].as_str().unwrap();
    let response = reqwest::Client::new()
        .get(format!("{admin}/console/api/state"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_regions_survive_a_partition_and_a_kill_fail_back_stop_cleanly_and_resume() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(DATA_DIR);
    let listen = format!("127.0.0.1:{}", port_outside_ephemeral_range(&["127.0.0.1"]));
    let up = Up::start(root.path(), &listen).await;
    let pids_at_start = pids_now(&dir);
    for secret in [
        "cluster.json",
        "node-admin-token",
        "router-admin-token",
        "store-operator-token",
        "demo-keys.txt",
    ] {
        assert_eq!(
            mode(&dir.join(secret)),
            0o600,
            "{secret} holds keys or the token"
        );
    }
    for region in up.cluster["regions"].as_array().unwrap() {
        let url = region["database_url"].as_str().unwrap();
        assert!(Path::new(url).is_absolute(), "{url}");
    }
    let tenants = up.cluster["tenants"].as_array().unwrap().clone();
    let homes: std::collections::BTreeSet<&str> = tenants
        .iter()
        .map(|t| t["home_region"].as_str().unwrap())
        .collect();
    assert_eq!(homes.len(), 3, "a tenant homed in every region");

    // One payment per tenant through the router, served by its home.
    let client = reqwest::Client::new();
    let router = up.cluster["router"]["url"].as_str().unwrap().to_owned();
    let mut first = Vec::new();
    for t in &tenants {
        let key = t["api_key"].as_str().unwrap();
        let body = payment_body("acc_1", "5.00", "order-up");
        let response = post(&client, &router, key, Some("k-up"), &body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.headers()["x-once-region"],
            t["home_region"].as_str().unwrap()
        );
        let answer = Answer::of(response).await;
        assert_eq!(
            answer.status,
            201,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        first.push((key.to_owned(), body, answer.body));
    }

    // Cut a region (not the router's) off from the others under load, then
    // heal: no invariant breaks, and its tenants are served elsewhere.
    let cut = tenants[1]["home_region"].as_str().unwrap();
    drill_holds(&dir, cut, "partition").await;

    // Kill the router's region under load: no invariant breaks.
    let victim = tenants[0]["home_region"].as_str().unwrap();
    drill_holds(&dir, victim, "kill").await;

    // The console lists both drills, newest first, with their timelines.
    let state = console_state(&up.cluster).await;
    let drills = state["drills"].as_array().expect("drills listed");
    let names: Vec<&str> = drills.iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["drill-kill", "drill-partition"], "{state}");
    for drill in drills {
        assert_eq!(drill["invariants_held"], true, "{drill}");
        assert!(drill["timeline"].as_array().unwrap().len() > 3, "{drill}");
    }
    assert_eq!(drills[0]["region"], victim);
    assert_eq!(drills[0]["fault"]["mode"], "kill");

    // One process at a time: gracefully, killed, skewed, wiped.
    restarts::one_process_at_a_time(&dir).await;

    // SIGTERM stops every child; nothing is left running — the restarted
    // region's new processes included.
    let pids = pids_now(&dir);
    assert_eq!(
        mode(&dir.join("cluster.json")),
        0o600,
        "rewritten with the restarted region's pids, still private"
    );
    assert_ne!(
        pids, pids_at_start,
        "the kill drill restarted a region: its processes are new ones"
    );
    let status = up.stop().await;
    assert!(status.success(), "{status:?}");
    eventually(Duration::from_secs(30), || async {
        pids.iter().all(|p| !alive(*p)).then_some(())
    })
    .await;

    // A second `once up --dir` resumes: earlier answers replay, byte for byte.
    let mut again = Up::start(root.path(), &listen).await;
    for (key, body, original) in &first {
        let replay = send(post(&client, &router, key, Some("k-up"), body)).await;
        assert_eq!(replay.status, 201);
        assert!(replay.replayed);
        assert_eq!(&replay.body, original);
    }

    // `once up` itself dies without a word (SIGKILL): its children notice
    // their lifeline close and stop on their own; none is left behind.
    let orphans = pids_now(&dir);
    again.process.kill().await;
    eventually(Duration::from_secs(30), || async {
        orphans.iter().all(|p| !alive(*p)).then_some(())
    })
    .await;
}
