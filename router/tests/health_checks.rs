//! A health check that misses its round still finishes, so the connection
//! it opened is kept for the next round instead of every round opening a
//! new one (RELIABILITY.md, finding 20).

mod common;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use once_test_support::wait::until;

use self::common::start_router;

/// A round's length; the node answers later than that.
const ROUND: Duration = Duration::from_millis(100);
const LATE: Duration = Duration::from_millis(150);

#[tokio::test]
async fn a_late_health_check_keeps_its_connection_for_the_next_round() {
    // The node: `/readyz` answers late; each check's connection is noted
    // by the client's address.
    let checks: Arc<Mutex<Vec<SocketAddr>>> = Arc::default();
    let app = Router::new().route(
        "/readyz",
        get({
            let checks = checks.clone();
            move |ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                checks.lock().unwrap().push(peer);
                tokio::time::sleep(LATE).await;
                "ready"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });

    start_router("us", &[format!("us=http://{node}")], |config| {
        config.health.interval = ROUND;
        config.auto_failover = false;
    })
    .await;
    until("twenty health checks", Duration::from_secs(30), || async {
        checks.lock().unwrap().len() >= 20
    })
    .await;

    // Every check missed its round. Had each been dropped with it, each
    // would have come on a connection of its own; finished, two or three
    // take turns (one still answering when the next round starts).
    let checks = checks.lock().unwrap().clone();
    let connections: HashSet<SocketAddr> = checks.iter().copied().collect();
    assert!(
        connections.len() <= 6,
        "{} checks came on {} connections",
        checks.len(),
        connections.len()
    );
}
