//! An in-process router over stand-in nodes, as every test here starts one:
//! on port 0, `acme`'s checkout key, health checks once a minute unless
//! `adjust` says otherwise, and a store address where nothing listens — so
//! a tenant lives in the router's own region and the nodes' answers (a
//! `421` naming another home) decide the rest.

use std::net::SocketAddr;
use std::time::Duration;

use once_edge::ApiKeys;
use once_router::{NodeDirectory, RouterApp, RouterConfig};
use once_test_support::fixtures::ACME_KEY;
use once_test_support::ports::closed_addr;

/// Starts a router of `region` over `nodes` (`region=url` each), serving
/// until the test ends: its public and its admin address. (`control.rs`
/// runs its router on a runtime of its own instead.)
#[allow(dead_code)]
pub async fn start_router(
    region: &str,
    nodes: &[String],
    adjust: impl FnOnce(&mut RouterConfig),
) -> (SocketAddr, SocketAddr) {
    let app = build_router(region, nodes, adjust).await;
    let addresses = (app.address(), app.admin_address());
    tokio::spawn(app.run_until(std::future::pending()));
    addresses
}

/// The router [`start_router`] starts, bound but not serving yet.
pub async fn build_router(
    region: &str,
    nodes: &[String],
    adjust: impl FnOnce(&mut RouterConfig),
) -> RouterApp {
    let mut config = RouterConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        region,
        vec![closed_addr().to_string()],
        NodeDirectory::parse(nodes).unwrap(),
    );
    config.health.interval = Duration::from_secs(60);
    adjust(&mut config);
    let keys = ApiKeys::from_plaintext_list(&format!("acme:checkout:{ACME_KEY}")).unwrap();
    RouterApp::build(config, keys).await.unwrap()
}

/// `acme` pays 1.00 through the router at `router` (`http://…`) under
/// `idempotency_key`. Not every test file here pays.
#[allow(dead_code)]
pub async fn pay(router: &str, idempotency_key: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{router}/payments"))
        .bearer_auth(ACME_KEY)
        .header("Idempotency-Key", idempotency_key)
        .body(r#"{"amount":"1.00"}"#)
        .send()
        .await
        .unwrap()
}
