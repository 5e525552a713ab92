//! The router's simulated partition switch (`/admin/partition`) against
//! fake nodes: a cut region is answered like a node refusing connections
//! (503 + `Retry-After: 1`, nothing sent), its health checks fail until it
//! is healed, and the switch sits behind the admin token.
//!
//! The store is unreachable here, so a tenant lives in the router's own
//! region and the only way to another region is a 421 naming it (the
//! node's hint decides); that is enough to prove the forward is cut.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use once_edge::{AdminToken, ApiKeys};
use once_router::{NodeDirectory, RouterApp, RouterConfig};
use serde_json::{Value, json};

const KEY: &str = "sk_test_acme_checkout_0001";
const ADMIN_TOKEN: &str = "router-admin-token-0123456789";

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

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A router in `region` over `us` and `eu`, health-checking every 100 ms
/// (down after 2 failed rounds, back after 1 good one), store unreachable,
/// no automatic failover.
/// A router's two listeners.
struct RouterUrls {
    public: String,
    admin: String,
}

async fn router(region: &str, us: SocketAddr, eu: SocketAddr) -> RouterUrls {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut config = RouterConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        region,
        vec![closed.to_string()],
        NodeDirectory::parse(&[format!("us=http://{us}"), format!("eu=http://{eu}")]).unwrap(),
    );
    config.health.interval = Duration::from_millis(100);
    config.health.failures = 2;
    config.health.successes = 1;
    config.admin_token = Some(AdminToken::new(ADMIN_TOKEN).unwrap());
    // No store to move tenants in; a round that publishes a region's status
    // still waits out the store client's deadline, hence the patient polls.
    config.auto_failover = false;
    let keys = ApiKeys::from_plaintext_list(&format!("acme:checkout:{KEY}")).unwrap();
    let app = RouterApp::build(config, keys).await.unwrap();
    let urls = RouterUrls {
        public: format!("http://{}", app.address()),
        admin: format!("http://{}", app.admin_address()),
    };
    tokio::spawn(app.run_until(std::future::pending()));
    urls
}

async fn pay(router: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{router}/payments"))
        .bearer_auth(KEY)
        .header("Idempotency-Key", "cut-1")
        .body(r#"{"amount":"1.00"}"#)
        .send()
        .await
        .unwrap()
}

async fn set_cut(router: &str, regions: &[&str]) -> Value {
    let answer = reqwest::Client::new()
        .post(format!("{router}/admin/partition"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({ "cut_regions": regions }))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.json().await.unwrap()
}

/// Whether this router's health view has `region` up.
async fn region_up(router: &str, region: &str) -> bool {
    let view: Value = reqwest::Client::new()
        .get(format!("{router}/admin/placements"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    view["regions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["region"] == region && r["up"] == true)
}

/// Polls `condition` every 50 ms until it holds; panics after 30 s.
async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !condition().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

    let state = set_cut(&router.admin, &["eu"]).await;
    assert_eq!(state["region"], "us");
    assert_eq!(state["cut_regions"], json!(["eu"]));
    assert_eq!(state["unreachable_regions"], json!(["eu"]));

    let answer = pay(&router.public).await;
    assert_eq!(answer.status(), 503);
    assert_eq!(answer.headers()["retry-after"], "1");
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["errorCode"], "SERVICE_UNAVAILABLE");
    assert_eq!(received.load(Ordering::SeqCst), 1, "nothing reached eu");

    eventually("eu is down in the router's view", || async {
        !region_up(&router.admin, "eu").await
    })
    .await;
    assert!(region_up(&router.admin, "us").await, "us is still up");

    set_cut(&router.admin, &[]).await;
    eventually("eu is up again", || region_up(&router.admin, "eu")).await;
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

    let state = set_cut(&router.admin, &["us"]).await;
    assert_eq!(state["unreachable_regions"], json!(["eu"]));
    let answer = pay(&router.public).await;
    assert_eq!(
        answer.status(),
        503,
        "us's own node still answers, eu cannot"
    );
    assert_eq!(received.load(Ordering::SeqCst), 0);
    eventually("eu is down in the router's view", || async {
        !region_up(&router.admin, "eu").await
    })
    .await;
    assert!(region_up(&router.admin, "us").await);
}

#[tokio::test]
async fn the_switch_is_behind_the_admin_token_and_knows_only_configured_regions() {
    let us = misdirecting_node().await;
    let (eu, _) = eu_node().await;
    let router = router("us", us, eu).await;
    let client = reqwest::Client::new();
    let url = format!("{}/admin/partition", router.admin);

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
    let state: Value = client
        .get(&url)
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["cut_regions"], json!([]), "nothing was cut");
}
