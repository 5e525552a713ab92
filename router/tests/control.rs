//! The router's control loops (health checker, placement refresher) and
//! its admin listener run on a thread of their own: while the runtime its
//! public listener runs on is held by client work, regions are still
//! health-checked, the placement table still read and probes still
//! answered (RELIABILITY.md, finding 17).

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use once_test_support::metrics::metric;
use once_test_support::serve::serve;
use once_test_support::wait::until;

/// `router_placement_refresh_failures_total` on the admin listener.
async fn refresh_failures(http: &reqwest::Client, admin: SocketAddr) -> f64 {
    metric(
        http,
        &format!("http://{admin}"),
        "router_placement_refresh_failures_total",
    )
    .await
}

/// How long each wait below may take.
const LIMIT: Duration = Duration::from_secs(20);

#[test]
fn the_control_loops_go_on_while_the_public_runtime_is_held() {
    // The test's runtime: the stand-in node, which counts health checks,
    // and the test's own requests.
    let outside = tokio::runtime::Runtime::new().unwrap();
    let checks = Arc::new(AtomicU64::new(0));
    let node = outside.block_on(serve(Router::new().route(
        "/readyz",
        get({
            let checks = checks.clone();
            move || async move {
                checks.fetch_add(1, Ordering::SeqCst);
                "ready"
            }
        }),
    )));

    // The router's runtime: one thread, which the test holds when it says.
    let (addresses_tx, addresses) = mpsc::channel();
    let (hold, held) = tokio::sync::oneshot::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let router = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let app = common::build_router("us", &[format!("us=http://{node}")], |config| {
                config.health.interval = Duration::from_millis(50);
                config.placement_refresh = Duration::from_millis(50);
                config.auto_failover = false;
            })
            .await;
            addresses_tx
                .send((app.address(), app.admin_address()))
                .unwrap();
            tokio::spawn(app.run_until(std::future::pending()));
            let _ = held.await;
            // Client work that never yields: the thread is the test's now.
            let _ = released.recv_timeout(Duration::from_secs(60));
        });
    });
    let (public, admin) = addresses.recv().unwrap();

    outside.block_on(async {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        let answers = |addr: SocketAddr| {
            let request = http.get(format!("http://{addr}/healthz")).send();
            async move { request.await.is_ok_and(|r| r.status().is_success()) }
        };
        until("the router serves", LIMIT, || answers(public)).await;
        hold.send(()).unwrap();
        until("the public listener stops answering", LIMIT, || async {
            !answers(public).await
        })
        .await;

        let (checks_then, failures_then) = (
            checks.load(Ordering::SeqCst),
            refresh_failures(&http, admin).await,
        );
        until("the node is health-checked", LIMIT, || async {
            checks.load(Ordering::SeqCst) >= checks_then + 3
        })
        .await;
        // The store is where nothing listens: each read of the table
        // fails, and is counted.
        until("the placement table is read", LIMIT, || async {
            refresh_failures(&http, admin).await > failures_then
        })
        .await;
        assert!(answers(admin).await, "the admin listener answers");
        assert!(
            !answers(public).await,
            "the public runtime was held throughout"
        );
    });
    release.send(()).unwrap();
    router.join().unwrap();
}
