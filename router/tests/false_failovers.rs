//! A region is declared down only on evidence that survives a loaded
//! machine (docs/decisions/0085-a-region-is-down-on-evidence-that-survives-load.md,
//! RELIABILITY.md finding 20): a node that answers late, or stalls for less
//! than `unconfirmed_after`, while raft-store's members still hear its
//! region's member, is not; a node that is gone (its port refuses), or
//! silent while the store has lost its member, is, within the window.
//!
//! Stand-ins: one node per region (`eu`, the router's own, always ready;
//! `us`, the subject, scripted) and three raft-store members answering
//! `/api/status` from a script (member 2 is `us`'s; members 1 and 3 say
//! when they last heard it).

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use once_store_client::protocol::{STATUS_PATH, Status};
use once_test_support::metrics::metric_sum;
use once_test_support::serve::serve;
use once_test_support::wait::until;

use self::common::start_router;

/// A round; three failed rounds reach the threshold.
const ROUND: Duration = Duration::from_millis(100);

/// What the `us` stand-in node does with `/readyz`.
#[derive(Debug, Clone, Copy)]
enum Node {
    Ready,
    /// Answers ready this long after each check arrives.
    Late(Duration),
    /// Answers nothing before this instant (then ready).
    StalledUntil(Instant),
}

type Script<T> = Arc<Mutex<T>>;

async fn readyz(State(node): State<Script<Node>>) -> &'static str {
    let now = *node.lock().unwrap();
    match now {
        Node::Ready => {}
        Node::Late(by) => tokio::time::sleep(by).await,
        Node::StalledUntil(at) => tokio::time::sleep_until(at.into()).await,
    }
    "ready"
}

/// The `us` node, and a switch that stops it: its listener closes, so
/// every later connection is refused — a node that died.
async fn us_node(node: Script<Node>) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let app = Router::new().route("/readyz", get(readyz)).with_state(node);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
    });
    (addr, stop)
}

/// How long ago members 1 and 3 last heard member 2 (`us`'s), in ms.
type Heard = Script<u64>;

/// Member `id` of three, in `region`, answering its status from `heard`.
async fn member(id: u64, region: &str, heard: Heard) -> String {
    let region = region.to_owned();
    let app = Router::new().route(
        STATUS_PATH,
        get(move |State(heard): State<Heard>| {
            let region = region.clone();
            async move {
                let member_2 = *heard.lock().unwrap();
                let peers = BTreeMap::from([(1, 20), (2, member_2), (3, 20)]);
                Json(Status {
                    id,
                    leader: Some(1),
                    term: 1,
                    region: Some(region),
                    member_regions: BTreeMap::from([
                        (1, "eu".to_owned()),
                        (2, "us".to_owned()),
                        (3, "ap".to_owned()),
                    ]),
                    leader_lease_ms: Some(400),
                    leader_heard_ms_ago: Some(20),
                    peers_heard_ms_ago: peers.into_iter().filter(|(p, _)| *p != id).collect(),
                    ..Status::default()
                })
            }
        })
        .with_state(heard),
    );
    format!("http://{}", serve(app).await)
}

struct Cluster {
    admin: String,
    node: Script<Node>,
    heard: Heard,
    stop_node: Option<tokio::sync::oneshot::Sender<()>>,
    http: reqwest::Client,
}

impl Cluster {
    async fn start() -> Self {
        let eu = serve(Router::new().route("/readyz", get(|| async { "ready" }))).await;
        let node: Script<Node> = Arc::new(Mutex::new(Node::Ready));
        let (us, stop_node) = us_node(node.clone()).await;
        let heard: Heard = Arc::new(Mutex::new(20));
        let members = vec![
            member(1, "eu", heard.clone()).await,
            member(3, "ap", heard.clone()).await,
        ];
        let (_, admin) = start_router(
            "eu",
            &[format!("eu=http://{eu}"), format!("us=http://{us}")],
            |config| {
                config.store_endpoints = members;
                config.health.interval = ROUND;
                config.health.failures = 3;
                config.health.unconfirmed_after = Duration::from_secs(2);
                // Declarations are what is counted; no store takes moves.
                config.auto_failover = false;
            },
        )
        .await;
        let cluster = Self {
            admin: format!("http://{admin}"),
            node,
            heard,
            stop_node: Some(stop_node),
            http: reqwest::Client::new(),
        };
        // Checked and found up before the test's fault.
        until("us checked healthy", Duration::from_secs(20), || async {
            cluster.sum("router_region_healthy", "region=\"us\"").await == 1.0
        })
        .await;
        cluster
    }

    async fn sum(&self, name: &str, filter: &str) -> f64 {
        metric_sum(&self.http, &self.admin, name, filter).await
    }

    async fn declarations(&self, evidence: &str) -> f64 {
        self.sum(
            "router_region_down_declarations_total",
            &format!("evidence=\"{evidence}\""),
        )
        .await
    }

    async fn all_declarations(&self) -> f64 {
        self.sum("router_region_down_declarations_total", "region=\"us\"")
            .await
    }

    async fn withheld(&self) -> f64 {
        self.sum("router_region_down_withheld_total", "region=\"us\"")
            .await
    }
}

#[tokio::test]
async fn a_node_stalled_for_less_than_the_window_while_the_store_hears_its_member_is_not_declared_down()
 {
    let cluster = Cluster::start().await;
    // 1.2 s without an answer: twelve rounds, four times the threshold —
    // declared down at the third before.
    let stalled_until = Instant::now() + Duration::from_millis(1200);
    *cluster.node.lock().unwrap() = Node::StalledUntil(stalled_until);
    until(
        "the failing streak reaches the threshold",
        Duration::from_secs(10),
        || async { cluster.withheld().await >= 1.0 },
    )
    .await;
    tokio::time::sleep_until((stalled_until + Duration::from_secs(2)).into()).await;
    assert_eq!(
        cluster.all_declarations().await,
        0.0,
        "a busy node whose region's member the store hears"
    );
    assert_eq!(
        cluster.sum("router_region_healthy", "region=\"us\"").await,
        1.0
    );
}

#[tokio::test]
async fn a_node_that_answers_every_check_late_is_not_declared_down_however_long() {
    let cluster = Cluster::start().await;
    // Every check answered 2.5 rounds late, for longer than the window:
    // every round fails, but the node answers all along.
    *cluster.node.lock().unwrap() = Node::Late(ROUND * 5 / 2);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(cluster.all_declarations().await, 0.0);
    assert_eq!(
        cluster.sum("router_region_healthy", "region=\"us\"").await,
        1.0
    );
}

#[tokio::test]
async fn a_silent_node_whose_member_the_store_lost_is_declared_down_within_the_window() {
    let cluster = Cluster::start().await;
    // The region's whole machine stops: the node answers nothing (its
    // port still takes connections), the other members stop hearing its
    // member.
    let lost_at = Instant::now();
    *cluster.node.lock().unwrap() = Node::StalledUntil(lost_at + Duration::from_secs(60));
    *cluster.heard.lock().unwrap() = 5_000;
    until("us declared down", Duration::from_secs(10), || async {
        cluster.all_declarations().await >= 1.0
    })
    .await;
    let took = lost_at.elapsed();
    assert_eq!(cluster.declarations("store_lost_its_member").await, 1.0);
    assert!(
        took < Duration::from_millis(1500),
        "declared {took:?} after the loss: within the window, not after unconfirmed_after"
    );
}

#[tokio::test]
async fn a_node_gone_is_declared_down_on_its_refusals_within_the_window() {
    let mut cluster = Cluster::start().await;
    let gone_at = Instant::now();
    cluster.stop_node.take().unwrap().send(()).unwrap();
    until("us declared down", Duration::from_secs(10), || async {
        cluster.all_declarations().await >= 1.0
    })
    .await;
    let took = gone_at.elapsed();
    assert_eq!(cluster.declarations("nothing_listens").await, 1.0);
    assert!(
        took < Duration::from_millis(1500),
        "declared {took:?} after"
    );
}

#[tokio::test]
async fn a_node_silent_past_the_window_is_declared_down_though_the_store_hears_its_member() {
    let cluster = Cluster::start().await;
    let stalled_at = Instant::now();
    *cluster.node.lock().unwrap() = Node::StalledUntil(stalled_at + Duration::from_secs(60));
    until("us declared down", Duration::from_secs(10), || async {
        cluster.all_declarations().await >= 1.0
    })
    .await;
    let took = stalled_at.elapsed();
    assert_eq!(cluster.declarations("failed_long").await, 1.0);
    assert!(took >= Duration::from_secs(2), "declared {took:?} after");
    assert!(cluster.withheld().await >= 1.0, "withheld first");
}
