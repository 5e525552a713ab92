//! The Raft RPC sender's error mapping, against small local servers:
//! what openraft is told decides whether it backs off, retries at once or
//! splits a batch.

use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::routing::post;
use once_raft_store::command::{Batch, ClientRequest, Op};
use once_raft_store::network::{APPEND_PATH, Network};
use once_raft_store::types::{AppendEntriesRequest, Entry, LogId, Node, RpcError, Vote};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::{CommittedLeaderId, EntryPayload};

fn append_of(n: u64, bytes_each: usize) -> AppendEntriesRequest {
    let entries = (1..=n)
        .map(|i| Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), i),
            payload: EntryPayload::Normal(Batch {
                requests: vec![ClientRequest {
                    client: 1,
                    seq: i,
                    acked_below: i,
                    now: 0,
                    op: Op::SetRegionStatus {
                        region: "x".repeat(bytes_each),
                        status: once_raft_store::command::RegionStatus::Healthy,
                    },
                }],
            }),
        })
        .collect();
    AppendEntriesRequest {
        vote: Vote::new_committed(1, 1),
        prev_log_id: None,
        leader_commit: None,
        entries,
    }
}

async fn connection_to(addr: String, max_body: usize) -> once_raft_store::network::Connection {
    let mut network = Network::new(2, None, Duration::from_secs(1), max_body).unwrap();
    network.new_client(1, &Node { addr }).await
}

#[tokio::test]
async fn a_peer_that_refuses_connections_is_unreachable() {
    // Bind and drop: nothing listens on this port any more.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut c = connection_to(addr.to_string(), 1 << 20).await;
    let err = c
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Unreachable(_)), "{err:?}");
}

#[tokio::test]
async fn a_batch_over_the_body_limit_is_payload_too_large_before_or_after_sending() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let app = Router::new()
        .route(
            APPEND_PATH,
            post(|_: Bytes| async { "unreachable in this test" }),
        )
        .layer(DefaultBodyLimit::max(1_000));
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The sender knows the limit: it never sends.
    let mut knows = connection_to(addr.clone(), 1_000).await;
    let err = knows
        .append_entries(append_of(10, 500), RPCOption::new(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::PayloadTooLarge(_)), "{err:?}");

    // The sender thinks the limit is higher: the receiver's 413 maps the same.
    let mut guesses = connection_to(addr, 1 << 20).await;
    let err = guesses
        .append_entries(append_of(10, 500), RPCOption::new(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::PayloadTooLarge(_)), "{err:?}");
}

#[tokio::test]
async fn a_peer_that_does_not_answer_in_time_is_a_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let app = Router::new().route(APPEND_PATH, post(std::future::pending::<&'static str>));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut c = connection_to(addr, 1 << 20).await;
    let err = c
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_millis(200)))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Timeout(_)), "{err:?}");
}
