//! The 421 contract with the node, against fake nodes (the real node
//! answers 421 only in its raft mode): a misdirected request is sent once
//! more, to the home the store names — or, when the store cannot be read,
//! the node's `X-Once-Home-Region` hint — and a second 421 reaches the
//! client.

mod common;

use std::net::SocketAddr;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use once_test_support::fixtures::ACME_KEY;
use once_test_support::serve::serve;

use self::common::start_router;

/// A node that is not the tenant's home: 421 naming `home`.
async fn misdirecting_node(home: &'static str) -> SocketAddr {
    serve(Router::new().route(
        "/payments",
        post(move || async move {
            (
                StatusCode::MISDIRECTED_REQUEST,
                [("x-once-home-region", home)],
                axum::Json(serde_json::json!({
                    "errorCode": "MISDIRECTED_REQUEST",
                    "message": "not this tenant's home",
                    "homeRegion": home,
                    "placementEpoch": 3,
                })),
            )
        }),
    ))
    .await
}

/// The home: echoes what it received, so the test sees the re-sent request.
async fn home_node() -> SocketAddr {
    serve(Router::new().route(
        "/payments",
        post(|headers: HeaderMap, body: String| async move {
            let key = headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            (
                StatusCode::CREATED,
                axum::Json(serde_json::json!({ "key": key, "body": body })),
            )
                .into_response()
        }),
    ))
    .await
}

/// A router in `us` whose store is unreachable, so the node's hint decides.
async fn router(nodes: &[String]) -> String {
    let (public, _) = start_router("us", nodes, |_| {}).await;
    format!("http://{public}")
}

fn pay(router: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(format!("{router}/payments"))
        .bearer_auth(ACME_KEY)
        .header("Idempotency-Key", "mis-1")
        .body(r#"{"amount":"1.00"}"#)
}

#[tokio::test]
async fn a_misdirected_request_is_sent_again_once_to_the_home_region() {
    let us = misdirecting_node("eu").await;
    let eu = home_node().await;
    let router = router(&[format!("us=http://{us}"), format!("eu=http://{eu}")]).await;

    let answer = pay(&router).send().await.unwrap();
    assert_eq!(answer.status(), 201);
    assert_eq!(answer.headers()["x-once-region"], "eu");
    let echoed: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(echoed["key"], "mis-1", "the same request, key and all");
    assert_eq!(echoed["body"], r#"{"amount":"1.00"}"#);
}

#[tokio::test]
async fn a_second_421_reaches_the_client() {
    let us = misdirecting_node("eu").await;
    let eu = misdirecting_node("us").await;
    let router = router(&[format!("us=http://{us}"), format!("eu=http://{eu}")]).await;

    let answer = pay(&router).send().await.unwrap();
    assert_eq!(answer.status(), 421);
    assert_eq!(answer.headers()["x-once-region"], "eu");
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["errorCode"], "MISDIRECTED_REQUEST");
}
