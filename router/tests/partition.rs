//! The router's simulated partition switch (`/admin/partition`) against
//! fake nodes: a cut region is answered like a node refusing connections
//! (503 + `Retry-After: 1`, nothing sent), its health checks fail until it
//! is healed, and the switch sits behind the admin token.
//!
//! The store is unreachable here, so a tenant lives in the router's own
//! region and the only way to another region is a 421 naming it (the
//! node's hint decides); that is enough to prove the forward is cut.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use once_edge::AdminToken;
use once_test_support::client::json_of;
use once_test_support::fixtures::ROUTER_ADMIN_TOKEN as ADMIN_TOKEN;
use once_test_support::router_admin::RouterAdmin;
use once_test_support::serve::serve;
use once_test_support::wait::until;
use serde_json::{Value, json};

use self::common::start_router;

/// How long a region's health may take to change in the router's view: a
/// round that publishes a region's status still waits out the store
/// client's deadline (there is no store), hence the patience.
const WAIT: Duration = Duration::from_secs(30);

/// A node in the router's region that says the tenant's home is `eu`.
async fn misdirecting_node() -> SocketAddr {
    serve(
        Router::new()
            .route(
                "/payments",
                post(|| async {
                    (
                        StatusCode::MISDIRECTED_REQUEST,
                        [("x-once-home-region", "eu")],
                        "{}",
                    )
                }),
            )
            .route("/readyz", get(|| async { "ready" })),
    )
    .await
}

/// The `eu` node: ready, answers 201, counts the payments reaching it.
async fn eu_node() -> (SocketAddr, Arc<AtomicUsize>) {
    let received = Arc::new(AtomicUsize::new(0));
    let counter = received.clone();
    let addr = serve(
        Router::new()
            .route(
                "/payments",
                post(move || async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    (StatusCode::CREATED, "{}")
                }),
            )
            .route("/readyz", get(|| async { "ready" })),
    )
    .await;
    (addr, received)
}

/// A router in `region` over `us` and `eu`, health-checking every 100 ms
/// (down after 2 failed rounds, back after 1 good one), store unreachable,
/// no automatic failover (no store to move tenants in).
struct TestRouter {
    public: String,
    admin: RouterAdmin,
}

async fn router(region: &str, us: SocketAddr, eu: SocketAddr) -> TestRouter {
    let nodes = [format!("us=http://{us}"), format!("eu=http://{eu}")];
    let (public, admin) = start_router(region, &nodes, |config| {
        config.health.interval = Duration::from_millis(100);
        config.health.failures = 2;
        config.health.successes = 1;
        config.admin_token = Some(AdminToken::new(ADMIN_TOKEN).unwrap());
        config.auto_failover = false;
    })
    .await;
    TestRouter {
        public: format!("http://{public}"),
        admin: RouterAdmin::new(format!("http://{admin}")),
    }
}

async fn pay(router: &str) -> reqwest::Response {
    common::pay(router, "cut-1").await
}

#[tokio::test]
async fn a_region_cut_at_the_router_answers_503_sends_nothing_and_fails_its_health_checks() {
    let us = misdirecting_node().await;
    let (eu, received) = eu_node().await;
    let router = router("us", us, eu).await;
    assert_eq!(
        pay(&router.public).await.status(),
        201,
        "eu reachable before the cut"
    );
    assert_eq!(received.load(Ordering::SeqCst), 1);

    let state = router.admin.cut(&["eu"]).await;
    assert_eq!(state["region"], "us");
    assert_eq!(state["cut_regions"], json!(["eu"]));
    assert_eq!(state["unreachable_regions"], json!(["eu"]));

    let answer = pay(&router.public).await;
    assert_eq!(answer.status(), 503);
    assert_eq!(answer.headers()["retry-after"], "1");
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["errorCode"], "SERVICE_UNAVAILABLE");
    assert_eq!(received.load(Ordering::SeqCst), 1, "nothing reached eu");

    until("eu is down in the router's view", WAIT, || async {
        !router.admin.region_up("eu").await
    })
    .await;
    assert!(router.admin.region_up("us").await, "us is still up");

    router.admin.cut(&[]).await;
    until("eu is up again", WAIT, || router.admin.region_up("eu")).await;
    assert_eq!(
        pay(&router.public).await.status(),
        201,
        "healed: eu served again"
    );
    assert_eq!(received.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_router_in_the_cut_region_is_cut_off_from_every_other_region() {
    let us = misdirecting_node().await;
    let (eu, received) = eu_node().await;
    let router = router("us", us, eu).await;

    let state = router.admin.cut(&["us"]).await;
    assert_eq!(state["unreachable_regions"], json!(["eu"]));
    let answer = pay(&router.public).await;
    assert_eq!(
        answer.status(),
        503,
        "us's own node still answers, eu cannot"
    );
    assert_eq!(received.load(Ordering::SeqCst), 0);
    until("eu is down in the router's view", WAIT, || async {
        !router.admin.region_up("eu").await
    })
    .await;
    assert!(router.admin.region_up("us").await);
}

#[tokio::test]
async fn the_switch_is_behind_the_admin_token_and_knows_only_configured_regions() {
    let us = misdirecting_node().await;
    let (eu, _) = eu_node().await;
    let router = router("us", us, eu).await;
    let client = reqwest::Client::new();
    let url = format!("{}/admin/partition", router.admin.url);

    let anonymous = client
        .post(&url)
        .json(&json!({"cut_regions": ["eu"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let unknown = client
        .post(&url)
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"cut_regions": ["mars"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 422);
    let state: Value = json_of(client.get(&url).bearer_auth(ADMIN_TOKEN)).await;
    assert_eq!(state["cut_regions"], json!([]), "nothing was cut");
}
