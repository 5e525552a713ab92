//! The drills tell the truth (issue 50): a chaos run whose skew nemesis
//! cannot run is refused before it sends anything; a run with a fault that
//! did not take effect exits non-zero and its headline says so, never "no
//! violation" alone; and a chaos run ends with every tenant at its
//! preferred home, as raft-store places them.
//!
//! The fault that does not take effect is a real one: `once up` is pointed
//! at a "libfaketime" that is no library (`ONCE_LIBFAKETIME`), so the
//! dynamic loader ignores the preload, the restarted process runs on the
//! true clock and the drill reads no offset back — what a broken or
//! mismatched libfaketime does on a real machine.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use once_store_client::client::ClientOptions;
use once_store_client::groups::StoreGroups;
use once_test_support::ports::port_outside_ephemeral_range;
use once_test_support::process::{self, Process};
use serde_json::json;
use tokio::process::Command;

use crate::helpers::ONCE;
use crate::up::{Up, operator_tls};

/// A listener that accepts connections and counts them, answering none:
/// where a drill that should send nothing would send its traffic.
async fn counting_listener() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (url, accepted)
}

#[tokio::test]
async fn a_skew_only_chaos_run_without_libfaketime_is_refused_before_any_load() {
    let dir = tempfile::tempdir().unwrap();
    let (url, accepted) = counting_listener().await;
    let region = |name: &str| {
        json!({
            "name": name,
            "node": {"url": url, "pid": std::process::id()},
            "store": {"api_url": url, "pid": std::process::id()},
            "database_url": format!("sqlite://{}", dir.path().join(name).display()),
        })
    };
    let cluster = dir.path().join("cluster.json");
    std::fs::write(
        &cluster,
        json!({
            "router": {"url": url},
            "provider": {"url": url},
            "admin_token": "a-drill-admin-token-of-enough-length",
            "tenants": [{"id": "acme", "api_key": "k", "home_region": "eu-west"}],
            "regions": [region("eu-west"), region("us-east"), region("ap-south")],
            "control": {"url": url, "token": "a-drill-control-token"},
        })
        .to_string(),
    )
    .unwrap();
    let missing = dir.path().join("no-faketime-here").join("libfaketime.so.1");
    let out = dir.path().join("chaos");
    let run = Command::new(ONCE)
        .args(["drill", "chaos", "--nemesis", "skew", "--duration", "5"])
        .arg("--cluster")
        .arg(&cluster)
        .arg("--out")
        .arg(&out)
        .env("ONCE_LIBFAKETIME", &missing)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "refused: {stderr}");
    assert!(stderr.contains("`faketime` package"), "{stderr}");
    assert!(
        stderr.contains(&missing.display().to_string()),
        "names where it looked: {stderr}"
    );
    assert!(
        !stderr.contains("chaos seed"),
        "no schedule drawn: {stderr}"
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "nothing was sent to the cluster"
    );
    assert!(!out.exists(), "no report of a run that did not happen");
}

/// `once up` (three regions) started in `root` with `env` set.
async fn up_with_env(root: &Path, env: &[(&str, &Path)]) -> Up {
    let listen = format!("127.0.0.1:{}", port_outside_ephemeral_range(&["127.0.0.1"]));
    let mut command = process::command(ONCE);
    command
        .args(["up", "--regions", "3", "--listen", &listen, "--dir", "data"])
        .current_dir(root);
    for (name, value) in env {
        command.env(name, value);
    }
    let (process, ()) = Process::start(command, "once up", Duration::from_secs(120), |line| {
        line.starts_with("once is up:").then_some(())
    })
    .await;
    let dir = root.join("data");
    let cluster = serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).unwrap())
        .expect("cluster.json");
    Up {
        process,
        cluster,
        dir,
    }
}

/// Every tenant's `(home, preferred home)` as raft-store places it now,
/// every group read.
async fn placements(cluster: &serde_json::Value) -> Vec<(String, String, String)> {
    let endpoints: Vec<String> = cluster["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["store"]["api_url"].as_str().unwrap().to_owned())
        .collect();
    let groups: Vec<String> = cluster["store_groups"]
        .as_array()
        .map(|g| g.iter().map(|g| g.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default();
    let store = StoreGroups::new(
        &endpoints,
        &groups,
        ClientOptions {
            tls: Some(operator_tls(cluster)),
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let mut all = Vec::new();
    for (_, group) in store.all() {
        for (tenant, p) in group.placements().await.expect("raft-store placements") {
            all.push((tenant, p.home, p.preferred_home));
        }
    }
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_that_does_not_take_effect_fails_the_run_and_chaos_brings_every_tenant_home() {
    let root = tempfile::tempdir().unwrap();
    // An ELF header and nothing after it: the drill's check sees a shared
    // object, the dynamic loader cannot load it and ignores the preload.
    let not_a_library = root.path().join("libfaketime.so.1");
    let mut bytes = b"\x7fELF\x02\x01\x01".to_vec();
    bytes.resize(64, 0);
    std::fs::write(&not_a_library, bytes).unwrap();
    let up = up_with_env(root.path(), &[("ONCE_LIBFAKETIME", &not_a_library)]).await;
    let cluster = up.cluster.clone();
    let tenants = cluster["tenants"].as_array().unwrap().len();

    // Tenants away from home before the run, as a failover leaves them.
    let away = cluster["regions"][0]["name"].as_str().unwrap().to_owned();
    let moved = reqwest::Client::new()
        .post(format!(
            "{}/admin/failover",
            cluster["router"]["admin_url"].as_str().unwrap()
        ))
        .bearer_auth(cluster["admin_tokens"]["router"].as_str().unwrap())
        .json(&json!({ "region": away }))
        .send()
        .await
        .unwrap();
    assert!(moved.status().is_success(), "{moved:?}");
    let before = placements(&cluster).await;
    assert_eq!(before.len(), tenants, "{before:?}");
    assert!(
        before.iter().any(|(_, home, preferred)| home != preferred),
        "a tenant of {away} is away before the run: {before:?}"
    );

    let out = root.path().join("chaos");
    let run = tokio::time::timeout(
        Duration::from_secs(600),
        Command::new(ONCE)
            .args(["drill", "chaos", "--nemesis", "skew", "--duration", "3"])
            .args(["--rate", "4", "--seed", "50", "--grace", "20"])
            .arg("--cluster")
            .arg(up.dir.join("cluster.json"))
            .arg("--out")
            .arg(&out)
            .env("ONCE_LIBFAKETIME", &not_a_library)
            .env("RUST_LOG", "warn")
            .output(),
    )
    .await
    .expect("the chaos run ends")
    .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let report_md = std::fs::read_to_string(out.join("report.md")).unwrap_or_default();
    assert!(
        !run.status.success(),
        "a run whose fault did not take effect fails:\n{stdout}\n{stderr}\n{report_md}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let faults = report["faults"].as_array().unwrap();
    assert_eq!(faults.len(), 1, "{report_md}");
    assert_eq!(faults[0]["took_effect"], false, "{report_md}");
    let headline = "1 of 1 faults did not take effect";
    assert!(
        report["verdict"].as_str().unwrap().contains(headline),
        "{}",
        report["verdict"]
    );
    assert_eq!(report["passed"], false);
    let title = report_md.lines().next().unwrap_or_default();
    assert!(
        title.contains(headline) && !title.contains("no violation"),
        "{title}"
    );
    assert!(stdout.contains(headline), "the terminal says so: {stdout}");
    assert!(stderr.contains(headline), "and so does the error: {stderr}");

    // Every tenant home, from raft-store, and the report says which were
    // failed back.
    let after = placements(&cluster).await;
    assert_eq!(after.len(), tenants, "{after:?}");
    for (tenant, home, preferred) in &after {
        assert_eq!(home, preferred, "{tenant} is home after the run: {after:?}");
    }
    let homecoming = &report["homecoming"];
    assert!(
        !homecoming["away_at_end"].as_array().unwrap().is_empty(),
        "{homecoming}"
    );
    assert!(
        homecoming["left_away"].as_array().unwrap().is_empty(),
        "{homecoming}"
    );
    assert!(
        homecoming["failbacks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["region"] == away.as_str()),
        "the run asked for {away}'s failback: {homecoming}"
    );

    let status = up.stop().await;
    assert!(status.success(), "{status:?}");
}
