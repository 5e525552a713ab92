//! Pipelined appends, the sender's side (`once_raft_store::pipeline`),
//! against a scripted follower: what the lane pushes as the leader's log
//! receives it, and that openraft is told `Success` only for entries the
//! follower acknowledged, in order, on the lane.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::post;
use once_raft_store::command::{Batch, ClientRequest, Op, RegionStatus};
use once_raft_store::log_store::AppendedBatch;
use once_raft_store::network::{APPEND_PATH, Connection, Network};
use once_raft_store::pipeline::{LANE_HEADER, LANE_SEQ_HEADER, PIPELINED_SINCE, Pipeline};
use once_raft_store::types::{
    AppendEntriesRequest, AppendEntriesResponse, Entry, LogId, Node, RaftError, RpcError, Vote,
};
use once_raft_store::wire::{self, Postcard, VERSION_HEADER};
use once_test_support::serve::serve;
use once_test_support::wait::until;
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::{CommittedLeaderId, EntryPayload};
use tokio::sync::broadcast;

fn vote() -> Vote {
    Vote::new_committed(1, 1)
}

fn log_id(index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn entries(indexes: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
    indexes
        .map(|i| Entry {
            log_id: log_id(i),
            payload: EntryPayload::Normal(Batch {
                requests: vec![ClientRequest {
                    client: 1,
                    seq: i,
                    acked_below: i,
                    now: 0,
                    op: Op::SetRegionStatus {
                        region: "eu-west".into(),
                        status: RegionStatus::Healthy,
                    },
                }],
            }),
        })
        .collect()
}

/// openraft's append of `indexes` after `prev`.
fn append(prev: Option<u64>, indexes: std::ops::RangeInclusive<u64>) -> AppendEntriesRequest {
    AppendEntriesRequest {
        vote: vote(),
        prev_log_id: prev.map(log_id),
        leader_commit: None,
        entries: entries(indexes),
    }
}

/// One append as the follower received it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    /// `(lane, seq)`; `None` for an append sent alone.
    lane: Option<(u64, u64)>,
    prev: Option<u64>,
    indexes: Vec<u64>,
}

/// A follower that declares the pipelining wire version, records every
/// append, and answers `Success` but to a lane append whose first entry is
/// in `refuse` (`Conflict`, or `HigherVote(higher)` given one).
async fn follower(refuse: BTreeSet<u64>, higher: Option<Vote>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    slow_follower(refuse, higher, Duration::ZERO).await
}

/// [`follower`], taking `lane_delay` to answer each lane append.
async fn slow_follower(
    refuse: BTreeSet<u64>,
    higher: Option<Vote>,
    lane_delay: Duration,
) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = Router::new().route(
        APPEND_PATH,
        post(move |headers: HeaderMap, body: Bytes| {
            let (log, refuse) = (log.clone(), refuse.clone());
            async move {
                let rpc: AppendEntriesRequest = wire::decode(&body).unwrap();
                let number = |name| {
                    headers
                        .get(name)
                        .map(|v| v.to_str().unwrap().parse::<u64>().unwrap())
                };
                let lane = number(LANE_HEADER).zip(number(LANE_SEQ_HEADER));
                let indexes: Vec<u64> = rpc.entries.iter().map(|e| e.log_id.index).collect();
                let refused = lane.is_some() && indexes.first().is_some_and(|i| refuse.contains(i));
                log.lock().unwrap().push(Seen {
                    lane,
                    prev: rpc.prev_log_id.map(|l| l.index),
                    indexes,
                });
                if lane.is_some() {
                    tokio::time::sleep(lane_delay).await;
                }
                let answer = match (refused, higher) {
                    (false, _) => AppendEntriesResponse::Success,
                    (true, Some(v)) => AppendEntriesResponse::HigherVote(v),
                    (true, None) => AppendEntriesResponse::Conflict,
                };
                (
                    [(VERSION_HEADER, PIPELINED_SINCE.to_string())],
                    Postcard(Ok::<_, RaftError>(answer)),
                )
                    .into_response()
            }
        }),
    );
    (serve(app).await.to_string(), seen)
}

/// A pipelining connection to `addr`, and the leader's log appends it
/// listens to.
async fn pipelined_connection(addr: String) -> (Connection, broadcast::Sender<AppendedBatch>) {
    let (appends, _) = broadcast::channel(64);
    let mut network = Network::new(2, None, Duration::from_secs(1), 1 << 20, None)
        .unwrap()
        .with_pipeline(Pipeline::new(appends.clone(), Duration::ZERO));
    (network.new_client(1, &Node { addr }).await, appends)
}

fn option() -> RPCOption {
    RPCOption::new(Duration::from_secs(2))
}

/// The leader's log receives `indexes`.
fn appended(appends: &broadcast::Sender<AppendedBatch>, indexes: std::ops::RangeInclusive<u64>) {
    appends.send(entries(indexes).into()).unwrap();
}

async fn seen_until(seen: &Arc<Mutex<Vec<Seen>>>, what: &str, count: usize) -> Vec<Seen> {
    until(what, Duration::from_secs(5), || async {
        seen.lock().unwrap().len() >= count
    })
    .await;
    seen.lock().unwrap().clone()
}

#[tokio::test]
async fn the_log_s_batches_are_pushed_in_order_and_openraft_s_append_of_them_is_answered_without_sending()
 {
    let (addr, seen) = follower(BTreeSet::new(), None).await;
    let (mut c, appends) = pipelined_connection(addr).await;

    // The first append goes alone: nothing is confirmed, and the follower's
    // version is not yet known.
    let answer = c
        .append_entries(append(None, 1..=2), option())
        .await
        .unwrap();
    assert_eq!(answer, AppendEntriesResponse::Success);

    appended(&appends, 3..=4);
    appended(&appends, 5..=5);
    let pushed = seen_until(&seen, "both batches pushed", 3).await;
    let (lane, _) = pushed[1].lane.expect("pushed on a lane");
    assert_eq!(
        pushed,
        vec![
            Seen {
                lane: None,
                prev: None,
                indexes: vec![1, 2]
            },
            Seen {
                lane: Some((lane, 0)),
                prev: Some(2),
                indexes: vec![3, 4]
            },
            Seen {
                lane: Some((lane, 1)),
                prev: Some(4),
                indexes: vec![5]
            },
        ]
    );

    // openraft asks for what the follower has acknowledged: answered, and
    // nothing more is sent.
    let answer = c
        .append_entries(append(Some(2), 3..=5), option())
        .await
        .unwrap();
    assert_eq!(answer, AppendEntriesResponse::Success);
    // An append that starts inside the lane and goes past it sends only
    // the rest, on the lane.
    let answer = c
        .append_entries(append(Some(4), 5..=7), option())
        .await
        .unwrap();
    assert_eq!(answer, AppendEntriesResponse::Success);
    let all = seen.lock().unwrap().clone();
    assert_eq!(
        all[3..],
        [Seen {
            lane: Some((lane, 2)),
            prev: Some(5),
            indexes: vec![6, 7]
        }]
    );
}

#[tokio::test]
async fn a_push_the_follower_refuses_breaks_the_lane_and_openraft_s_append_goes_alone() {
    let (addr, seen) = follower(BTreeSet::from([3]), None).await;
    let (mut c, appends) = pipelined_connection(addr).await;
    c.append_entries(append(None, 1..=2), option())
        .await
        .unwrap();

    appended(&appends, 3..=4);
    // After a refusal the lane pushes nothing more.
    seen_until(&seen, "the refused push", 2).await;
    appended(&appends, 5..=5);

    // Not `Success` from the lane: the append is sent alone and its own
    // answer (here `Success`, a real one) is what openraft gets.
    let answer = c
        .append_entries(append(Some(2), 3..=5), option())
        .await
        .unwrap();
    assert_eq!(answer, AppendEntriesResponse::Success);
    let all = seen.lock().unwrap().clone();
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(
        all[2],
        Seen {
            lane: None,
            prev: Some(2),
            indexes: vec![3, 4, 5]
        }
    );
}

#[tokio::test]
async fn a_push_slower_than_openraft_s_wait_keeps_its_lane_and_answers_openraft_s_next_append() {
    let (addr, seen) = slow_follower(BTreeSet::new(), None, Duration::from_millis(300)).await;
    let (mut c, appends) = pipelined_connection(addr).await;
    c.append_entries(append(None, 1..=2), option())
        .await
        .unwrap();
    appended(&appends, 3..=4);
    seen_until(&seen, "the push", 2).await;

    // openraft gives up on its append before the push is answered: a
    // timeout, and the lane goes on.
    let err = c
        .append_entries(
            append(Some(2), 3..=4),
            RPCOption::new(Duration::from_millis(50)),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Timeout(_)), "{err:?}");
    // Its next append is answered by the push, with nothing sent again.
    let answer = c
        .append_entries(append(Some(2), 3..=4), option())
        .await
        .unwrap();
    assert_eq!(answer, AppendEntriesResponse::Success);
    let all = seen.lock().unwrap().clone();
    assert_eq!(all.len(), 2, "{all:?}");
}

#[tokio::test]
async fn a_higher_vote_met_by_a_push_is_openraft_s_answer() {
    let higher = Vote::new_committed(2, 3);
    let (addr, seen) = follower(BTreeSet::from([3]), Some(higher)).await;
    let (mut c, appends) = pipelined_connection(addr).await;
    c.append_entries(append(None, 1..=2), option())
        .await
        .unwrap();
    appended(&appends, 3..=4);
    seen_until(&seen, "the push", 2).await;
    let answer = c
        .append_entries(append(Some(2), 3..=4), option())
        .await
        .unwrap();
    assert_eq!(answer, AppendEntriesResponse::HigherVote(higher));
}

#[tokio::test]
async fn another_leader_s_entries_are_never_pushed() {
    let (addr, seen) = follower(BTreeSet::new(), None).await;
    let (mut c, appends) = pipelined_connection(addr).await;
    c.append_entries(append(None, 1..=2), option())
        .await
        .unwrap();
    // This member follows again: its log receives the next leader's entries.
    let theirs: AppendedBatch = vec![Entry {
        log_id: LogId::new(CommittedLeaderId::new(2, 3), 3),
        payload: EntryPayload::Blank,
    }]
    .into();
    appends.send(theirs).unwrap();
    // Then one of this leadership's, after the gap: not contiguous either.
    appended(&appends, 4..=4);
    // A heartbeat at the confirmed position travels the lane: once it has
    // arrived, anything pushed before it has too.
    let heartbeat = AppendEntriesRequest {
        vote: vote(),
        prev_log_id: Some(log_id(2)),
        leader_commit: Some(log_id(2)),
        entries: Vec::new(),
    };
    assert_eq!(
        c.append_entries(heartbeat, option()).await.unwrap(),
        AppendEntriesResponse::Success
    );
    let all = seen_until(&seen, "the heartbeat", 2).await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[1].indexes, Vec::<u64>::new());
    assert_eq!(all[1].prev, Some(2));
}
