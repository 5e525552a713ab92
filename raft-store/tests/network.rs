//! The Raft RPC sender's error mapping, against small local servers:
//! what openraft is told decides whether it backs off, retries at once or
//! splits a batch; and the simulated WAN's latency and partitions, two-way
//! and one-way.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use once_raft_store::command::{Batch, ClientRequest, Op};
use once_raft_store::network::{APPEND_PATH, Network};
use once_raft_store::types::{
    AppendEntriesRequest, AppendEntriesResponse, Entry, LogId, Node, RaftError, RpcError, Vote,
};
use once_raft_store::wan::{
    PARTITIONED_HEADER, REGION_HEADER, SetPartition, SimulatedWan, WanConfig, is_partition_refusal,
};
use once_raft_store::wire::{self, Postcard};
use once_test_support::ports::closed_addr;
use once_test_support::serve::serve;
use once_test_support::wait::until;
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
    let mut network = Network::new(2, None, Duration::from_secs(1), max_body, None).unwrap();
    network.new_client(1, &Node { addr }).await
}

#[tokio::test]
async fn a_peer_that_refuses_connections_is_unreachable() {
    let mut c = connection_to(closed_addr().to_string(), 1 << 20).await;
    let err = c
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Unreachable(_)), "{err:?}");
}

#[tokio::test]
async fn a_batch_over_the_body_limit_is_payload_too_large_before_or_after_sending() {
    let app = Router::new()
        .route(
            APPEND_PATH,
            post(|_: Bytes| async { "unreachable in this test" }),
        )
        .layer(DefaultBodyLimit::max(1_000));
    let addr = serve(app).await.to_string();

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
    let app = Router::new().route(APPEND_PATH, post(std::future::pending::<&'static str>));
    let addr = serve(app).await.to_string();
    let mut c = connection_to(addr, 1 << 20).await;
    let err = c
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_millis(200)))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Timeout(_)), "{err:?}");
}

/// A peer that takes `delay` to answer every append `Success`, and counts
/// them.
async fn slow_counting_peer(delay: Duration) -> (String, Arc<AtomicUsize>) {
    let appends = Arc::new(AtomicUsize::new(0));
    let counted = appends.clone();
    let app = Router::new().route(
        APPEND_PATH,
        post(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                Postcard(Ok::<_, RaftError>(AppendEntriesResponse::Success))
            }
        }),
    );
    (serve(app).await.to_string(), appends)
}

#[tokio::test]
async fn an_append_answered_after_openraft_s_wait_answers_openraft_s_retry_without_a_second_send() {
    let (addr, appends) = slow_counting_peer(Duration::from_millis(300)).await;
    let mut c = connection_to(addr, 1 << 20).await;
    let err = c
        .append_entries(append_of(2, 10), RPCOption::new(Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Timeout(_)), "{err:?}");
    // openraft sends the same entries again: the append in flight answers.
    let answer = c
        .append_entries(append_of(2, 10), RPCOption::new(Duration::from_secs(2)))
        .await
        .unwrap();
    assert_eq!(answer, AppendEntriesResponse::Success);
    assert_eq!(appends.load(Ordering::SeqCst), 1, "sent once");
}

#[tokio::test]
async fn a_retry_with_more_entries_is_told_how_far_the_append_in_flight_reached() {
    let (addr, appends) = slow_counting_peer(Duration::from_millis(300)).await;
    let mut c = connection_to(addr, 1 << 20).await;
    c.append_entries(append_of(2, 10), RPCOption::new(Duration::from_millis(100)))
        .await
        .unwrap_err();
    let answer = c
        .append_entries(append_of(5, 10), RPCOption::new(Duration::from_secs(2)))
        .await
        .unwrap();
    let second = LogId::new(CommittedLeaderId::new(1, 1), 2);
    assert_eq!(answer, AppendEntriesResponse::PartialSuccess(Some(second)));
    assert_eq!(appends.load(Ordering::SeqCst), 1);
    // openraft then sends the rest, over the wire.
    let mut rest = append_of(5, 10);
    rest.prev_log_id = Some(second);
    rest.entries.drain(..2);
    let answer = c
        .append_entries(rest, RPCOption::new(Duration::from_secs(2)))
        .await
        .unwrap();
    assert_eq!(answer, AppendEntriesResponse::Success);
    assert_eq!(appends.load(Ordering::SeqCst), 2);
}

// The simulated WAN (`once_raft_store::wan`) in the sender.

fn wan(region: &str, peer_regions: &[(u64, &str)], latency_ms: u64) -> Arc<SimulatedWan> {
    Arc::new(SimulatedWan::new(WanConfig {
        region: region.into(),
        peer_regions: peer_regions
            .iter()
            .map(|(id, r)| (*id, r.to_string()))
            .collect(),
        latency: Duration::from_millis(latency_ms),
    }))
}

async fn connection_through(
    addr: String,
    wan: Arc<SimulatedWan>,
) -> once_raft_store::network::Connection {
    let mut network = Network::new(2, None, Duration::from_secs(1), 1 << 20, None)
        .unwrap()
        .with_wan(wan);
    network.new_client(1, &Node { addr }).await
}

/// A peer that counts the RPCs reaching it, remembers the sender's region
/// and answers 500 (the sender's `Network` error).
async fn counting_peer() -> (String, Arc<AtomicUsize>, Arc<Mutex<Option<String>>>) {
    let (count, region) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(None)));
    let (c, r) = (count.clone(), region.clone());
    let app = Router::new().route(
        APPEND_PATH,
        post(move |headers: HeaderMap, _: Bytes| async move {
            c.fetch_add(1, Ordering::SeqCst);
            *r.lock().unwrap() = headers
                .get(REGION_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(String::from);
            (StatusCode::INTERNAL_SERVER_ERROR, "counted")
        }),
    );
    let addr = serve(app).await.to_string();
    (addr, count, region)
}

#[tokio::test]
async fn an_rpc_to_another_region_waits_one_simulated_round_trip_and_names_its_region() {
    let (addr, count, region) = counting_peer().await;
    let mut c = connection_through(addr, wan("eu-west", &[(1, "us-east")], 150)).await;
    let started = Instant::now();
    let err = c
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Network(_)), "{err:?}");
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(count.load(Ordering::SeqCst), 1);
    assert_eq!(region.lock().unwrap().as_deref(), Some("eu-west"));
}

#[tokio::test]
async fn an_isolated_member_sends_nothing_to_another_region_and_calls_it_unreachable() {
    let (addr, count, _) = counting_peer().await;
    let wan = wan("eu-west", &[], 0);
    let mut c = connection_through(addr, wan.clone()).await;
    wan.set_isolated(true);
    let err = c
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Unreachable(_)), "{err:?}");
    assert_eq!(count.load(Ordering::SeqCst), 0, "nothing was sent");

    wan.set_isolated(false);
    let err = c
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, RpcError::Network(_)),
        "healed: sent again, {err:?}"
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_peer_isolated_from_this_region_is_unreachable() {
    let peer = wan("us-east", &[], 0);
    peer.set_isolated(true);
    let app = Router::new().route(
        APPEND_PATH,
        post(move |headers: HeaderMap, _: Bytes| async move {
            peer.refusal(headers.get(REGION_HEADER).and_then(|v| v.to_str().ok()))
        }),
    );
    let addr = serve(app).await.to_string();
    let mut c = connection_through(addr, wan("eu-west", &[], 0)).await;
    let err = c
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Unreachable(_)), "{err:?}");
}

#[tokio::test]
async fn a_member_sends_nothing_to_a_cut_region_and_sends_again_once_healed() {
    let (addr, count, _) = counting_peer().await;
    // Member 1 (the target) is in us-east; this member is in eu-west.
    let wan = wan("eu-west", &[(1, "us-east")], 0);
    let mut c = connection_through(addr, wan.clone()).await;
    wan.set_cut_regions(["ap-south"]).unwrap();
    let err = c
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, RpcError::Network(_)),
        "another region's cut does not touch this link: {err:?}"
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);

    wan.set_cut_regions(["us-east"]).unwrap();
    let err = c
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Unreachable(_)), "{err:?}");
    assert_eq!(count.load(Ordering::SeqCst), 1, "nothing was sent");

    wan.set_cut_regions(Vec::<String>::new()).unwrap();
    c.append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert_eq!(count.load(Ordering::SeqCst), 2, "healed: sent again");
}

#[tokio::test]
async fn a_peer_that_cut_this_region_is_unreachable() {
    let peer = wan("us-east", &[], 0);
    peer.set_cut_regions(["eu-west"]).unwrap();
    let app = Router::new().route(
        APPEND_PATH,
        post(move |headers: HeaderMap, _: Bytes| async move {
            let from = headers.get(REGION_HEADER).and_then(|v| v.to_str().ok());
            assert!(!peer.accepts(from), "the peer refuses {from:?}");
            peer.refusal(from)
        }),
    );
    let addr = serve(app).await.to_string();
    let mut c = connection_through(addr, wan("eu-west", &[], 0)).await;
    let err = c
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Unreachable(_)), "{err:?}");
}

/// A member's Raft listener behind `wan`'s partition, as `raft_service`
/// puts it: refuses what `wan` does not accept, answers `Success` to the
/// appends that get through and counts them.
async fn member_behind(wan: Arc<SimulatedWan>) -> (String, Arc<AtomicUsize>) {
    let delivered = Arc::new(AtomicUsize::new(0));
    let counted = delivered.clone();
    let app = Router::new().route(
        APPEND_PATH,
        post(move |headers: HeaderMap, _: Bytes| async move {
            let from = headers.get(REGION_HEADER).and_then(|v| v.to_str().ok());
            if !wan.accepts(from) {
                return wan.refusal(from);
            }
            counted.fetch_add(1, Ordering::SeqCst);
            Postcard(Ok::<_, RaftError>(AppendEntriesResponse::Success)).into_response()
        }),
    );
    (serve(app).await.to_string(), delivered)
}

#[tokio::test]
async fn a_one_way_cut_refuses_the_refused_regions_rpcs_and_still_sends_to_it() {
    // eu-west refuses us-east's requests; us-east refuses nothing.
    let eu = wan("eu-west", &[(1, "us-east")], 0);
    let us = wan("us-east", &[(1, "eu-west")], 0);
    let state = eu
        .apply(SetPartition::refuse_from(["us-east"]))
        .expect("us-east is another region");
    assert!(state.cut_regions.is_empty() && state.refuse_from == ["us-east"]);
    let (eu_addr, reached_eu) = member_behind(eu.clone()).await;
    let (us_addr, reached_us) = member_behind(us.clone()).await;

    // us-east → eu-west: refused as partitioned, which the sender maps to
    // Unreachable; nothing reaches eu-west.
    let refused = reqwest::Client::new()
        .post(format!("http://{eu_addr}{APPEND_PATH}"))
        .header(REGION_HEADER, "us-east")
        .body(wire::encode(&append_of(1, 10)).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()[PARTITIONED_HEADER], "true");
    assert!(is_partition_refusal(503, refused.headers()));
    let mut us_to_eu = connection_through(eu_addr, us).await;
    let err = us_to_eu
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Unreachable(_)), "{err:?}");
    assert_eq!(reached_eu.load(Ordering::SeqCst), 0);

    // eu-west → us-east: sent, delivered, answered.
    let mut eu_to_us = connection_through(us_addr, eu.clone()).await;
    let answer = eu_to_us
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(1)))
        .await
        .expect("the other way is open");
    assert_eq!(answer, AppendEntriesResponse::Success);
    assert_eq!(reached_us.load(Ordering::SeqCst), 1);

    // Healed: us-east gets through again.
    eu.apply(SetPartition::refuse_from(Vec::<String>::new()))
        .unwrap();
    us_to_eu
        .append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(1)))
        .await
        .expect("healed");
    assert_eq!(reached_eu.load(Ordering::SeqCst), 1);
}

// Commit notices answered at once and sent in the background
// (`once_raft_store::network`, "Commit notices do not hold up the next
// append").

/// A peer that takes `delay` to answer every append: `Success` to one with
/// entries; to an empty one `HigherVote(v)` given `higher`, else `Success`.
/// Counts the empty ones.
async fn slow_peer(delay: Duration, higher: Option<Vote>) -> (String, Arc<AtomicUsize>) {
    let empties = Arc::new(AtomicUsize::new(0));
    let counted = empties.clone();
    let app = Router::new().route(
        APPEND_PATH,
        post(move |body: Bytes| {
            let counted = counted.clone();
            async move {
                let rpc: AppendEntriesRequest = wire::decode(&body).unwrap();
                tokio::time::sleep(delay).await;
                let answer = if rpc.entries.is_empty() {
                    counted.fetch_add(1, Ordering::SeqCst);
                    higher.map_or(
                        AppendEntriesResponse::Success,
                        AppendEntriesResponse::HigherVote,
                    )
                } else {
                    AppendEntriesResponse::Success
                };
                Postcard(Ok::<_, RaftError>(answer))
            }
        }),
    );
    let addr = serve(app).await.to_string();
    (addr, empties)
}

/// The empty append openraft sends after a commit: the follower's matching
/// position, the new commit index.
fn commit_notice(at: LogId) -> AppendEntriesRequest {
    AppendEntriesRequest {
        vote: Vote::new_committed(1, 1),
        prev_log_id: Some(at),
        leader_commit: Some(at),
        entries: Vec::new(),
    }
}

#[tokio::test]
async fn a_commit_notice_at_the_confirmed_position_is_answered_at_once_and_still_sent() {
    let delay = Duration::from_millis(300);
    let (addr, empties) = slow_peer(delay, None).await;
    let mut c = connection_to(addr, 1 << 20).await;
    let option = || RPCOption::new(Duration::from_secs(2));

    let started = Instant::now();
    let appended = c.append_entries(append_of(2, 10), option()).await.unwrap();
    assert_eq!(appended, AppendEntriesResponse::Success);
    assert!(
        started.elapsed() >= delay,
        "entries wait for the real answer"
    );

    let last = LogId::new(CommittedLeaderId::new(1, 1), 2);
    let started = Instant::now();
    let noticed = c
        .append_entries(commit_notice(last), option())
        .await
        .unwrap();
    assert_eq!(noticed, AppendEntriesResponse::Success);
    assert!(
        started.elapsed() < delay,
        "answered without waiting for the peer"
    );
    until(
        "the notice reaches the peer",
        Duration::from_secs(5),
        || async { empties.load(Ordering::SeqCst) == 1 },
    )
    .await;
}

#[tokio::test]
async fn an_empty_append_at_an_unconfirmed_position_waits_for_the_real_answer() {
    let delay = Duration::from_millis(200);
    let higher = Vote::new_committed(2, 3);
    let (addr, empties) = slow_peer(delay, Some(higher)).await;
    let at = LogId::new(CommittedLeaderId::new(1, 1), 2);

    // A fresh connection — what openraft's read-index leadership check
    // uses — has confirmed nothing: its empty append goes over the wire.
    let mut fresh = connection_to(addr.clone(), 1 << 20).await;
    let started = Instant::now();
    let answer = fresh
        .append_entries(commit_notice(at), RPCOption::new(Duration::from_secs(2)))
        .await
        .unwrap();
    assert_eq!(answer, AppendEntriesResponse::HigherVote(higher));
    assert!(started.elapsed() >= delay);

    // A probe at a position the peer never confirmed (here: one entry
    // further than it holds) waits too; it moves openraft's matching index.
    let mut used = connection_to(addr, 1 << 20).await;
    used.append_entries(append_of(1, 10), RPCOption::new(Duration::from_secs(2)))
        .await
        .unwrap();
    let answer = used
        .append_entries(commit_notice(at), RPCOption::new(Duration::from_secs(2)))
        .await
        .unwrap();
    assert_eq!(answer, AppendEntriesResponse::HigherVote(higher));
    assert_eq!(empties.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_higher_vote_met_by_a_background_notice_is_answered_on_the_next_call() {
    let higher = Vote::new_committed(2, 3);
    let (addr, empties) = slow_peer(Duration::from_millis(50), Some(higher)).await;
    let mut c = connection_to(addr, 1 << 20).await;
    let option = || RPCOption::new(Duration::from_secs(2));
    c.append_entries(append_of(2, 10), option()).await.unwrap();

    let last = LogId::new(CommittedLeaderId::new(1, 1), 2);
    assert_eq!(
        c.append_entries(commit_notice(last), option())
            .await
            .unwrap(),
        AppendEntriesResponse::Success
    );
    until(
        "the notice reaches the peer",
        Duration::from_secs(5),
        || async { empties.load(Ordering::SeqCst) == 1 },
    )
    .await;
    // The background answer has to arrive too; the next call reports it.
    let next = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match c
                .append_entries(commit_notice(last), option())
                .await
                .unwrap()
            {
                AppendEntriesResponse::HigherVote(v) => return v,
                AppendEntriesResponse::Success => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                other => panic!("{other:?}"),
            }
        }
    })
    .await
    .expect("the higher vote reaches the leader");
    assert_eq!(next, higher);
}
