//! The server with TLS: the client's identity on each request, and the
//! connections that never become one — plain HTTP, no certificate, a
//! handshake that stalls — closed within the header read timeout, the
//! limits of a plaintext listener still in force after the handshake.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::Extension;
use axum::routing::get;
use axum::{Router, body::Bytes};
use once_edge::{EdgeMetrics, Server, ServerLimits};
use once_test_support::pki::TestPki;
use once_test_support::raw::closed_within;
use once_tls::{Identity, Role, Tls};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

fn limits() -> ServerLimits {
    ServerLimits {
        header_read_timeout: Duration::from_millis(500),
        body_read_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_millis(500),
        request_deadline: Duration::from_secs(2),
        ..ServerLimits::default()
    }
}

/// Answers with the caller's identity URI (empty without one); `/echo`
/// returns its body.
async fn serve(tls: &Tls) -> SocketAddr {
    let router = Router::new()
        .route(
            "/who",
            get(|identity: Option<Extension<Identity>>| async move {
                identity.map(|Extension(i)| i.uri()).unwrap_or_default()
            }),
        )
        .route(
            "/echo",
            axum::routing::post(|body: Bytes| async move { body }),
        );
    let server = Server::bind(
        "test",
        "127.0.0.1:0".parse().unwrap(),
        limits(),
        EdgeMetrics::default(),
    )
    .await
    .unwrap()
    .with_tls(tls.server_config());
    let addr = server.local_addr();
    tokio::spawn(server.serve(router, std::future::pending(), Duration::from_secs(1)));
    addr
}

#[tokio::test]
async fn each_request_carries_the_identity_its_clients_certificate_names() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path());
    let addr = serve(&pki.tls("server", "eu-west", Role::StoreMember)).await;
    let node = pki
        .tls("node", "us-east", Role::Node)
        .http_client()
        .build()
        .unwrap();
    for _ in 0..2 {
        // Twice: the kept-alive connection's second request carries it too.
        let who = node
            .get(format!("https://{addr}/who"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(who, "spiffe://once/us-east/node");
    }
    let echoed = node
        .post(format!("https://{addr}/echo"))
        .body("a body through TLS")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(echoed, "a body through TLS");
}

#[tokio::test]
async fn plain_http_and_a_silent_client_are_closed_without_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path());
    let addr = serve(&pki.tls("server", "eu-west", Role::StoreMember)).await;

    assert!(reqwest::get(format!("http://{addr}/who")).await.is_err());

    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"GET /who HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    assert!(closed_within(&mut plain, Duration::from_secs(2)).await);

    // Connects and says nothing: closed at the header read timeout.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(2)).await);
}
