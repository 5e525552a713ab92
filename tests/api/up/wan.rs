//! `once up --wan-latency 70`: three regions a simulated 70 ms round trip
//! apart, and how a node judges raft-store (decision 0058).
//!
//! - A region without raft-store's leader is as ready as the leader's: its
//!   node judges the store by the nearest member's view, not by a read
//!   through the leader two round trips away. Before, those regions answered
//!   the router's probe "waiting on shared-store" past its budget, were
//!   declared cut off as the cluster started, and their tenants failed over
//!   to the leader's region.
//! - The leader's member SIGKILLed alone fails no region over: its region's
//!   node, its own member gone, asks the next member — in the background,
//!   so no probe waits on another region (decision 0059) — and judges the
//!   store as the other regions do.

use std::time::Duration;

use once_test_support::metrics::metric_sum;
use once_test_support::ports::port_outside_ephemeral_range;

use super::{Up, cluster_http};
use crate::helpers::{eventually, payment_body, post};

/// The router's check interval under `once up`, sent as the answer budget
/// of each probe (what `router/src/health.rs` sends).
const ROUTER_INTERVAL_MS: &str = "200";

/// Probe rounds per region: at most a third may miss the budget.
const ROUNDS: usize = 15;

async fn up_across_a_wan(root: &std::path::Path) -> Up {
    let listen = format!("127.0.0.1:{}", port_outside_ephemeral_range(&["127.0.0.1"]));
    Up::start_with(root, &listen, &["--wan-latency", "70"]).await
}

/// Every tenant's new payment through the router is served by its home
/// region.
async fn every_tenant_served_at_home(up: &Up, idempotency_key: &str) {
    let http = reqwest::Client::new();
    let router = up.cluster["router"]["url"].as_str().unwrap();
    for tenant in up.cluster["tenants"].as_array().unwrap() {
        let key = tenant["api_key"].as_str().unwrap();
        let body = payment_body("acc_1", "5.00", idempotency_key);
        let response = post(&http, router, key, Some(idempotency_key), &body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "{key}");
        assert_eq!(
            response.headers()["x-once-region"],
            tenant["home_region"].as_str().unwrap(),
            "{key} served at home; the router's log:\n{}",
            router_downs(&up.dir)
        );
    }
}

/// The router's log lines that say a region went down or was moved: what
/// a failed assertion on [`failovers`] shows, so it names the region and
/// when.
fn router_downs(root: &std::path::Path) -> String {
    let log = std::fs::read_to_string(root.join("logs/router.log")).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains("region down") || l.contains("placement moved"))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn failovers(up: &Up) -> f64 {
    let admin = up.cluster["router"]["admin_url"].as_str().unwrap();
    metric_sum(
        &reqwest::Client::new(),
        admin,
        "router_region_failovers_total",
        "",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_a_wan_every_region_is_ready_and_serves_its_own_tenants() {
    let root = tempfile::tempdir().unwrap();
    let up = up_across_a_wan(root.path()).await;
    let http = reqwest::Client::new();

    // Every region's node, probed as the router probes it, round after
    // round: ready within the router's budget, whichever member leads. (A
    // probe may miss its budget on a starved machine; a read through the
    // leader missed it every time.)
    for region in up.cluster["regions"].as_array().unwrap() {
        let admin = region["node"]["admin_url"].as_str().unwrap();
        let mut not_ready = Vec::new();
        for _ in 0..ROUNDS {
            let answer = http
                .get(format!("{admin}/readyz"))
                .header(once_edge::ops::ANSWER_WITHIN_HEADER, ROUTER_INTERVAL_MS)
                .send()
                .await
                .unwrap();
            if answer.status() != 200 {
                not_ready.push(answer.text().await.unwrap());
            }
        }
        assert!(
            not_ready.len() <= ROUNDS / 3,
            "{} not ready in {} of {ROUNDS} rounds: {not_ready:?}",
            region["name"],
            not_ready.len()
        );
    }

    // No region went down as the cluster started.
    every_tenant_served_at_home(&up, "order-wan").await;
    assert_eq!(failovers(&up).await, 0.0, "{}", router_downs(&up.dir));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_a_wan_the_store_leaders_member_killed_alone_fails_no_region_over() {
    let root = tempfile::tempdir().unwrap();
    let up = up_across_a_wan(root.path()).await;
    every_tenant_served_at_home(&up, "before-kill").await;
    assert_eq!(
        failovers(&up).await,
        0.0,
        "before the kill: {}",
        router_downs(&up.dir)
    );

    // The member that leads, as the first region's member knows it; then
    // SIGKILLed alone:
    // its region's node lives on.
    let store = cluster_http(&up.cluster);
    let regions = up.cluster["regions"].as_array().unwrap().clone();
    let status = |admin: String| {
        let store = store.clone();
        async move {
            let answer = store.get(format!("{admin}/api/status")).send().await.ok()?;
            answer.json::<serde_json::Value>().await.ok()
        }
    };
    let admin_of = |r: &serde_json::Value| r["store"]["admin_url"].as_str().unwrap().to_owned();
    let leader = eventually(Duration::from_secs(30), || async {
        let s = status(admin_of(&regions[0])).await?;
        s["leader"].as_u64()
    })
    .await;
    let leading = regions
        .iter()
        .find(|r| r["store"]["id"].as_u64() == Some(leader))
        .expect("the leader is a region's member");
    let pid = nix::unistd::Pid::from_raw(leading["store"]["pid"].as_i64().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();

    // The survivors elect another leader.
    let survivors: Vec<&serde_json::Value> = regions
        .iter()
        .filter(|r| r["store"]["id"].as_u64() != Some(leader))
        .collect();
    eventually(Duration::from_secs(30), || async {
        let s = status(admin_of(survivors[0])).await?;
        let new = s["leader"].as_u64()?;
        (new != leader && s["leader_heard_ms_ago"].as_u64()? < 1_000).then_some(())
    })
    .await;

    // No region was failed over for it; every tenant is still served at
    // home, the killed member's region's through the new leader.
    every_tenant_served_at_home(&up, "after-kill").await;
    assert_eq!(
        failovers(&up).await,
        0.0,
        "{} killed: {}",
        leading["name"],
        router_downs(&up.dir)
    );
}
