//! A failover whose evacuation write had applied but whose answer was lost,
//! or came late, is still counted as this router's move (RELIABILITY.md,
//! findings 21 and 22).
//!
//! The store stand-in applies the router's first evacuation of `us` and
//! then answers every write `Unavailable` for longer than the router's
//! store deadline, so the router's write ends ambiguous. The next round
//! sends the same `(client, seq)` again, which the stand-in answers from
//! its dedup table with the first outcome — as raft-store does — and the
//! move is counted. A router that wrote a new evacuation instead would be
//! answered `again` (the region is already evacuated) and count nothing.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::{get, post};
use once_store_client::command::{ClientRequest, Op, Placement, Reply};
use once_store_client::protocol::{
    Answer, READ_PATH, Read, ReadReply, STATUS_PATH, Status, WRITE_PATH,
};
use once_store_client::wire;
use once_test_support::metrics::metric_sum;
use once_test_support::serve::serve;
use once_test_support::wait::until;

use self::common::start_router;

/// How long after the first evacuation every write is answered
/// `Unavailable`: past the router's store deadline (5 s).
const LOST_FOR: Duration = Duration::from_millis(5500);

#[derive(Debug, Default)]
struct Store {
    /// Each applied write's reply, by `(client, seq)`.
    replies: HashMap<(u64, u64), Reply>,
    /// When the first evacuation of `us` applied.
    evacuated_at: Option<Instant>,
    evacuations_received: usize,
    /// Placement reads answered with the move applied.
    moved_reads: usize,
}

type Shared = Arc<Mutex<Store>>;

async fn write(State(store): State<Shared>, body: Bytes) -> Vec<u8> {
    let request: ClientRequest = wire::decode(&body).unwrap();
    let mut store = store.lock().unwrap();
    if matches!(request.op, Op::EvacuateRegion { .. }) {
        store.evacuations_received += 1;
    }
    let key = (request.client, request.seq);
    let lost = store.evacuated_at.is_some_and(|at| at.elapsed() < LOST_FOR);
    let answer = if let Some(first) = store.replies.get(&key) {
        // A resent write: its first outcome (raft-store's dedup).
        if lost {
            Answer::Unavailable("timed out waiting for the commit".to_owned())
        } else {
            Answer::Done(first.clone())
        }
    } else {
        let reply = match &request.op {
            Op::EvacuateRegion { from, .. } if from == "us" => Reply::Evacuated {
                number: 1,
                again: store.evacuated_at.is_some(),
            },
            _ => Reply::Ok,
        };
        store.replies.insert(key, reply.clone());
        if matches!(reply, Reply::Evacuated { again: false, .. }) {
            // Applied; its answer is lost.
            store.evacuated_at = Some(Instant::now());
            Answer::Unavailable("timed out waiting for the commit".to_owned())
        } else if lost {
            Answer::Unavailable("timed out waiting for the commit".to_owned())
        } else {
            Answer::Done(reply)
        }
    };
    wire::encode(&answer).unwrap()
}

async fn read(State(store): State<Shared>, body: Bytes) -> Vec<u8> {
    let read: Read = wire::decode(&body).unwrap();
    let evacuated = {
        let mut store = store.lock().unwrap();
        let evacuated = store.evacuated_at.is_some();
        if evacuated && matches!(read, Read::Placements) {
            store.moved_reads += 1;
        }
        evacuated
    };
    let answer = match read {
        // acme, homed in us with standby eu; moved once the evacuation
        // applied.
        Read::Placements => {
            let (home, standbys, epoch) = if evacuated {
                ("eu", vec!["us".to_owned()], 2)
            } else {
                ("us", vec!["eu".to_owned()], 1)
            };
            Answer::Done(ReadReply::Placements(vec![(
                "acme".to_owned(),
                Placement {
                    home: home.to_owned(),
                    standbys,
                    epoch,
                    preferred_home: "us".to_owned(),
                },
            )]))
        }
        Read::Regions => Answer::Done(ReadReply::Regions(Vec::new())),
        _ => Answer::Unavailable("not scripted".to_owned()),
    };
    wire::encode(&answer).unwrap()
}

async fn status() -> Json<Status> {
    Json(Status {
        id: 1,
        leader: Some(1),
        term: 1,
        ..Status::default()
    })
}

/// Applies the first evacuation of `us` and answers it only once the
/// router's periodic refresh has read the move: by then its cache shows
/// nothing homed in `us` (the chaos drill's loaded machine, where a commit
/// answer can take longer than a refresh round).
async fn write_answered_late(State(store): State<Shared>, body: Bytes) -> Vec<u8> {
    let request: ClientRequest = wire::decode(&body).unwrap();
    let reply = {
        let mut store = store.lock().unwrap();
        match &request.op {
            Op::EvacuateRegion { from, .. } if from == "us" => {
                store.evacuations_received += 1;
                let again = store.evacuated_at.is_some();
                store.evacuated_at.get_or_insert_with(Instant::now);
                Reply::Evacuated { number: 1, again }
            }
            _ => Reply::Ok,
        }
    };
    if matches!(reply, Reply::Evacuated { again: false, .. }) {
        until(
            "the router's refresh read the move",
            Duration::from_secs(10),
            || async { store.lock().unwrap().moved_reads > 0 },
        )
        .await;
    }
    wire::encode(&Answer::Done(reply)).unwrap()
}

/// A router in `eu` over a store stand-in answering writes with `write`,
/// `us` down; returns the count of its automatic moves from `us` to `eu`.
async fn fail_over_us(
    store: &Shared,
    write: axum::routing::MethodRouter<Shared>,
) -> impl AsyncFn() -> f64 {
    let member = serve(
        Router::new()
            .route(WRITE_PATH, write)
            .route(READ_PATH, post(read))
            .route(STATUS_PATH, get(status))
            .with_state(store.clone()),
    )
    .await;
    let eu = serve(Router::new().route("/readyz", get(|| async { "ready" }))).await;
    // us's node: nothing listens, so us is declared down on refusals.
    let us: SocketAddr = once_test_support::ports::closed_addr();
    let (_, admin) = start_router(
        "eu",
        &[format!("eu=http://{eu}"), format!("us=http://{us}")],
        |config| {
            config.store_endpoints = vec![format!("http://{member}")];
            config.health.interval = Duration::from_millis(100);
            config.health.settle = Duration::ZERO;
            config.placement_refresh = Duration::from_millis(200);
        },
    )
    .await;
    let http = reqwest::Client::new();
    let admin = format!("http://{admin}");
    async move || {
        metric_sum(
            &http,
            &admin,
            "router_placement_moves_total",
            "from=\"us\",to=\"eu\",trigger=\"automatic\"",
        )
        .await
    }
}

#[tokio::test]
async fn a_move_whose_answer_was_lost_is_counted_once_the_same_write_is_answered() {
    let store: Shared = Arc::default();
    let moves = fail_over_us(&store, post(write)).await;
    until(
        "the first evacuation applied",
        Duration::from_secs(20),
        || async { store.lock().unwrap().evacuated_at.is_some() },
    )
    .await;
    until("the move counted", Duration::from_secs(30), || async {
        moves().await == 1.0
    })
    .await;
    let store = store.lock().unwrap();
    assert!(
        store.evacuations_received >= 2,
        "the write was sent again: {}",
        store.evacuations_received
    );
    let evacuations = store
        .replies
        .values()
        .filter(|r| matches!(r, Reply::Evacuated { .. }))
        .count();
    assert_eq!(evacuations, 1, "one evacuation, sent again as itself");
}

#[tokio::test]
async fn a_move_answered_after_the_cache_read_it_is_still_counted() {
    let store: Shared = Arc::default();
    let moves = fail_over_us(&store, post(write_answered_late)).await;
    until("the move counted", Duration::from_secs(30), || async {
        moves().await == 1.0
    })
    .await;
    let store = store.lock().unwrap();
    assert_eq!(
        store.evacuations_received, 1,
        "one evacuation, answered once"
    );
    assert!(store.moved_reads > 0, "the cache read the move first");
}
