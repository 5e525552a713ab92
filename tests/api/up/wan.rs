//! `once up --wan-latency 70`: three regions a simulated 70 ms round trip
//! apart. A region without raft-store's leader is as ready as the leader's:
//! its node judges the store by the nearest member's view, not by a read
//! through the leader two round trips away (decision 0058). Before, those
//! regions answered the router's probe "waiting on shared-store" past its
//! 200 ms budget, were declared cut off as the cluster started, and their
//! tenants failed over to the leader's region.

use once_test_support::ports::port_outside_ephemeral_range;

use super::Up;
use crate::helpers::{payment_body, post};

/// The router's check interval under `once up`, sent as the answer budget
/// of each probe (what `router/src/health.rs` sends).
const ROUTER_INTERVAL_MS: &str = "200";

/// Probe rounds per region: each must be answered ready.
const ROUNDS: usize = 15;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_a_wan_every_region_is_ready_and_serves_its_own_tenants() {
    let root = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", port_outside_ephemeral_range(&["127.0.0.1"]));
    let up = Up::start_with(root.path(), &listen, &["--wan-latency", "70"]).await;
    let http = reqwest::Client::new();

    // Every region's node, probed as the router probes it, round after
    // round: ready within the router's budget, whichever member leads.
    for _ in 0..ROUNDS {
        for region in up.cluster["regions"].as_array().unwrap() {
            let admin = region["node"]["admin_url"].as_str().unwrap();
            let answer = http
                .get(format!("{admin}/readyz"))
                .header(once_edge::ops::ANSWER_WITHIN_HEADER, ROUTER_INTERVAL_MS)
                .send()
                .await
                .unwrap();
            let status = answer.status();
            let body = answer.text().await.unwrap();
            assert_eq!(status, 200, "{} not ready: {body}", region["name"]);
        }
    }

    // No region went down as the cluster started: each tenant is served by
    // its home region.
    let router = up.cluster["router"]["url"].as_str().unwrap();
    for tenant in up.cluster["tenants"].as_array().unwrap() {
        let key = tenant["api_key"].as_str().unwrap();
        let body = payment_body("acc_1", "5.00", "order-wan");
        let response = post(&http, router, key, Some("k-wan"), &body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "{key}");
        assert_eq!(
            response.headers()["x-once-region"],
            tenant["home_region"].as_str().unwrap(),
            "{key} served at home"
        );
    }
}
