//! Only the API's routes reach a node, and only in the one form every hop
//! reads alike. `/payments/%2e%2e/metrics` once matched the router's
//! `/payments/{*rest}` and, resolved by the HTTP client, reached the
//! node's `/metrics`; `/payments/../admin/records` reached the admin API.
//! Requests are written raw on a socket: an HTTP client library would
//! normalise the very paths under test before sending them.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::Request;
use once_test_support::fixtures::ACME_KEY;
use once_test_support::raw::exchange;
use once_test_support::serve::serve;

use self::common::start_router;

/// A node that answers 200 to anything and remembers every path it saw,
/// but for the router's own health checks (`/readyz`).
async fn recording_node() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = Router::new().fallback(move |request: Request| {
        let log = log.clone();
        async move {
            if request.uri().path() != "/readyz" {
                log.lock().unwrap().push(request.uri().to_string());
            }
            "reached"
        }
    });
    (serve(app).await, seen)
}

async fn router(node: SocketAddr) -> SocketAddr {
    start_router("us", &[format!("us=http://{node}")], |_| {})
        .await
        .0
}

/// Sends `method target` raw and returns the status code and body.
async fn raw(router: SocketAddr, method: &str, target: &str) -> (u16, String) {
    let request = format!(
        "{method} {target} HTTP/1.1\r\nHost: once\r\nAuthorization: Bearer {ACME_KEY}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let answer = exchange(router, &request).await;
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    (status, body)
}

#[tokio::test]
async fn traversal_variants_are_400_and_never_reach_a_node() {
    let (node, seen) = recording_node().await;
    let router = router(node).await;
    for target in [
        "/payments/%2e%2e/metrics",
        "/payments/%2E%2E/metrics",
        "/payments/.%2e/admin/records",
        "/payments/../admin/records",
        "/payments/./../metrics",
        "/payments/x/../../metrics",
        "/payments/..%2fmetrics",
        "/payments/%2fadmin%2frecords",
        "/payments/%5c..%5cmetrics",
        "/payments/..\\metrics",
        "/payments//metrics",
    ] {
        for method in ["GET", "POST"] {
            let (status, body) = raw(router, method, target).await;
            assert_eq!(status, 400, "{method} {target}: {body}");
            assert!(body.contains("INVALID_PATH"), "{method} {target}: {body}");
        }
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "reached a node: {:?}",
        seen.lock().unwrap()
    );
}

#[tokio::test]
async fn only_the_api_routes_are_forwarded() {
    let (node, seen) = recording_node().await;
    let router = router(node).await;
    // Not API routes, or not the API's method: answered by the router.
    for (method, target) in [
        ("GET", "/metrics"),
        ("GET", "/admin/records"),
        ("GET", "/payments/pay_1/refunds"),
        ("DELETE", "/payments/pay_1"),
        ("PUT", "/payments"),
    ] {
        let (status, body) = raw(router, method, target).await;
        let code = match status {
            404 => "NOT_FOUND",
            405 => "METHOD_NOT_ALLOWED",
            _ => panic!("{method} {target}: {status}"),
        };
        assert!(body.contains(code), "{method} {target}: {body}");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "reached a node: {:?}",
        seen.lock().unwrap()
    );
    // The API's own routes are.
    assert_eq!(raw(router, "GET", "/payments/pay_0123abcd").await.0, 200);
    assert_eq!(raw(router, "POST", "/payments").await.0, 200);
    // A listing keeps its query string (filters, cursor) as sent.
    let listing = "/payments?accountId=acc_1&merchantReference=order%201&limit=5&cursor=AQ-_";
    assert_eq!(raw(router, "GET", listing).await.0, 200);
    assert_eq!(raw(router, "GET", "/payments").await.0, 200);
    assert_eq!(
        *seen.lock().unwrap(),
        ["/payments/pay_0123abcd", "/payments", listing, "/payments"]
    );
}
