//! A node that refused a connection is skipped until its backoff passes
//! and one request probes it, or a health check reaches it: requests for
//! it are answered `503` at once, nothing dialled
//! (`once_router::reachability`).
//!
//! The node's port is bound but not listening until the test says so, so
//! every connection before that is refused and nothing else can take it.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use once_router::FailFast;

use once_test_support::metrics::metric;
use once_test_support::wait::until;
use tokio::net::TcpSocket;

use self::common::start_router;

/// A port that refuses connections until [`Node::listen`]: what a node
/// that died (or whose host did) looks like to the router.
struct Node {
    socket: TcpSocket,
    received: Arc<AtomicUsize>,
}

impl Node {
    fn refusing() -> (Self, String) {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let url = format!("us=http://{}", socket.local_addr().unwrap());
        let node = Self {
            socket,
            received: Arc::default(),
        };
        (node, url)
    }

    /// Starts answering: `201` to a payment (counted), `200` to `/readyz`.
    fn listen(self) -> Arc<AtomicUsize> {
        let counter = self.received.clone();
        let app = Router::new()
            .route(
                "/payments",
                post(move || async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    (StatusCode::CREATED, "{}")
                }),
            )
            .route("/readyz", get(|| async { "ready" }));
        let listener = self.socket.listen(64).unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        self.received
    }
}

async fn router(node: &str, fail_fast: FailFast, health_every: Duration) -> (String, String) {
    let (public, admin) = start_router("us", &[node.to_owned()], |config| {
        config.fail_fast = fail_fast;
        config.health.interval = health_every;
        config.auto_failover = false;
    })
    .await;
    let admin = format!("http://{admin}");
    // The first health check round runs at once, on the router's control
    // thread: wait until it has met the refusing node, or it could reach
    // the node after the test lets it listen and end its backoff early.
    until(
        "the first health check round",
        Duration::from_secs(10),
        || async {
            metric(
                &reqwest::Client::new(),
                &admin,
                r#"router_region_consecutive_failures{region="us"}"#,
            )
            .await
                >= 1.0
        },
    )
    .await;
    (format!("http://{public}"), admin)
}

async fn pay(router: &str) -> reqwest::Response {
    common::pay(router, "fail-fast-1").await
}

async fn failed_fast(admin: &str) -> f64 {
    metric(
        &reqwest::Client::new(),
        admin,
        r#"router_failed_fast_total{region="us"}"#,
    )
    .await
}

fn skipped_for(longest: Duration) -> FailFast {
    FailFast {
        after: 1,
        first: longest,
        longest,
    }
}

#[tokio::test]
async fn a_node_that_refused_is_not_dialled_again_within_its_backoff() {
    let (node, url) = Node::refusing();
    let (public, admin) = router(
        &url,
        skipped_for(Duration::from_secs(60)),
        Duration::from_secs(600),
    )
    .await;

    let first = pay(&public).await;
    assert_eq!(first.status(), 503);
    let body: serde_json::Value = first.json().await.unwrap();
    assert_eq!(body["errorCode"], "SERVICE_UNAVAILABLE");

    // The node is up now, but the router does not know it: it answers at
    // once instead of dialling, and says when to come back.
    let received = node.listen();
    let second = pay(&public).await;
    assert_eq!(second.status(), 503);
    let retry_after: u64 = second.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (50..=60).contains(&retry_after),
        "Retry-After is the backoff left, got {retry_after}"
    );
    assert_eq!(received.load(Ordering::SeqCst), 0, "nothing was dialled");
    assert!(failed_fast(&admin).await >= 1.0);
}

#[tokio::test]
async fn after_the_backoff_one_request_probes_the_node_and_traffic_resumes() {
    let (node, url) = Node::refusing();
    let (public, _admin) = router(
        &url,
        skipped_for(Duration::from_millis(200)),
        Duration::from_secs(600),
    )
    .await;
    assert_eq!(pay(&public).await.status(), 503);

    let received = node.listen();
    until(
        "a probe reaches the node",
        Duration::from_secs(10),
        || async { pay(&public).await.status() == 201 },
    )
    .await;
    assert_eq!(received.load(Ordering::SeqCst), 1);
    assert_eq!(
        pay(&public).await.status(),
        201,
        "reachable again: dialled at once"
    );
    assert_eq!(received.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_health_check_that_reaches_the_node_ends_its_backoff() {
    let (node, url) = Node::refusing();
    let (public, _admin) = router(
        &url,
        skipped_for(Duration::from_secs(600)),
        Duration::from_millis(100),
    )
    .await;
    assert_eq!(pay(&public).await.status(), 503);

    let received = node.listen();
    until(
        "the health check brings the node back",
        Duration::from_secs(10),
        || async { pay(&public).await.status() == 201 },
    )
    .await;
    assert_eq!(received.load(Ordering::SeqCst), 1);
}
