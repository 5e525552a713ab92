//! `once router` as a real process in front of real `once node` processes
//! (SQLite) and a 3-member `once store` cluster: routing by placement, the
//! node's 401, keys and trace context reaching the node, a region SIGKILLed
//! and its tenant failed over, two routers racing that failover, failback on
//! command, a region cut off at the router by its simulated partition switch
//! (failed over the same way, back after healing), and an unreachable node
//! answered with 503 + Retry-After.
//!
//! Most nodes here run in `sql` mode and never answer 421; the last
//! scenario runs raft-mode nodes so a stale router meets a real 421 from the
//! former home region and converges.

use std::sync::Arc;
use std::time::Duration;

use once_store_client::admin;
use once_store_client::client::{ClientOptions, StoreClient};
use once_store_client::command::{Placement, RegionStatus, Reply};
use once_store_client::groups::group_endpoints;
use once_test_support::client::status_of;
use once_test_support::fixtures::ROUTER_ADMIN_TOKEN as ADMIN_TOKEN;
use once_test_support::pki::TestPki;
use once_test_support::ports::closed_addr;
use once_test_support::process::Process;
use once_test_support::router_admin::RouterAdmin;
use once_test_support::wait::http_ready;
use once_test_support::web_pki::WebCa;
use once_tls::Role;

use crate::helpers::{
    ACME_KEY, Answer, Backend, GLOBEX_KEY, NodeProcess, ONCE, TestDb, eventually, metric,
    metric_sum, payment_body, send, start_role,
};
use crate::raft_store::cluster::Cluster;
use crate::raft_store::groups::{assign, group_led_by};

const WAIT: Duration = Duration::from_secs(30);

/// The flags of a node behind routers: a node certificate of `cluster`'s
/// CA, and `--api-callers routers`.
fn behind_routers(cluster: &Cluster) -> Vec<String> {
    let mut args = cluster.tls_flags("node", once_tls::Role::Node);
    args.extend(["--api-callers".to_owned(), "routers".to_owned()]);
    args
}

/// Flags of a router in `region` over `cluster`, forwarding to the `eu`
/// and `us` nodes at `urls`, with its router certificate; `extra` adds or
/// tunes.
fn router_args(
    cluster: &Cluster,
    region: &str,
    (eu, us): (&str, &str),
    extra: &[&str],
) -> Vec<String> {
    let mut args = vec![
        "--region".to_owned(),
        region.to_owned(),
        "--store-endpoints".to_owned(),
        cluster.endpoints().join(","),
        "--nodes".to_owned(),
        format!("eu={eu},us={us}"),
    ];
    args.extend(cluster.store_groups_flags());
    args.extend(cluster.tls_flags("router", once_tls::Role::Router));
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// A real `once router` process.
#[derive(Debug)]
struct RouterProcess {
    url: String,
    /// The admin listener: `/metrics`, `/admin/*`.
    admin_api: RouterAdmin,
    /// Killed when dropped.
    _process: Process,
    client: reqwest::Client,
}

impl RouterProcess {
    async fn start(args: &[String]) -> Self {
        let (process, url, admin_url) =
            start_role("router", args, &[("ONCE_ADMIN_TOKEN", ADMIN_TOKEN)]).await;
        Self {
            url,
            admin_api: RouterAdmin::new(admin_url),
            _process: process,
            client: reqwest::Client::new(),
        }
    }

    fn pay(&self, key: &str, idempotency_key: &str, body: String) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}/payments", self.url))
            .bearer_auth(key)
            .header("Idempotency-Key", idempotency_key)
            .header("Content-Type", "application/json")
            .body(body)
    }

    /// Waits for `/readyz`: the store answers and placements are loaded.
    async fn wait_ready(&self) {
        http_ready(&self.client, &format!("{}/readyz", self.url), WAIT).await
    }

    async fn admin(&self, path: &str, region: &str) -> Answer {
        send(
            self.client
                .post(format!("{}{path}", self.admin_api.url))
                .bearer_auth(ADMIN_TOKEN)
                .json(&serde_json::json!({ "region": region })),
        )
        .await
    }

    /// Sum of a metric's samples whose line contains `filter`.
    async fn metric(&self, name: &str, filter: &str) -> f64 {
        metric_sum(&self.client, &self.admin_api.url, name, filter).await
    }
}

/// Two regions, `eu` and `us`, one SQLite node each, and the store.
struct Regions {
    cluster: Cluster,
    store: StoreClient,
    eu: Option<NodeProcess>,
    us: NodeProcess,
    eu_url: String,
    _dbs: (TestDb, TestDb),
}

impl Regions {
    async fn start() -> Self {
        let cluster = Cluster::start(3).await;
        let store = cluster.client(ClientOptions::default());
        let (eu_db, us_db) = (
            TestDb::new(Backend::Sqlite).await,
            TestDb::new(Backend::Sqlite).await,
        );
        // Behind routers, as deployed: mutual TLS, routers answered only.
        let behind_routers = behind_routers(&cluster);
        let behind_routers: Vec<&str> = behind_routers.iter().map(String::as_str).collect();
        let eu = NodeProcess::start(&eu_db, &behind_routers, &[]).await;
        let us = NodeProcess::start(&us_db, &behind_routers, &[]).await;
        Self {
            eu_url: eu.url.clone(),
            cluster,
            store,
            eu: Some(eu),
            us,
            _dbs: (eu_db, us_db),
        }
    }

    /// Flags of a router in `eu` over both regions; `extra` adds or tunes.
    fn router_args(&self, extra: &[&str]) -> Vec<String> {
        let mut args = router_args(
            &self.cluster,
            "eu",
            (&self.eu_url, &self.us.url),
            &["--placement-refresh", "200ms"],
        );
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// Places `tenant` for the first time; returns the placement (epoch 1).
    async fn place(&self, tenant: &str, home: &str, standbys: &[&str]) -> Placement {
        let standbys: Vec<String> = standbys.iter().map(|s| s.to_string()).collect();
        match self
            .store
            .set_placement(tenant, 0, home, &standbys)
            .await
            .expect("store answers")
        {
            Reply::Placement(p) => p,
            other => panic!("placement not set: {other:?}"),
        }
    }

    async fn placement(&self, tenant: &str) -> Placement {
        self.store
            .placement(tenant)
            .await
            .expect("store answers")
            .expect("tenant is placed")
    }

    async fn kill_eu(&mut self) {
        if let Some(eu) = self.eu.take() {
            eu.kill().await;
        }
    }
}

fn region_of(answer: &reqwest::Response) -> String {
    answer
        .headers()
        .get("x-once-region")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Sends a payment through the router until it succeeds from `region`
/// (the router's cache catches up with the store within a refresh).
async fn pay_until_served_by(
    router: &RouterProcess,
    key: &str,
    idempotency_key: &str,
    region: &str,
) -> serde_json::Value {
    eventually(WAIT, || async {
        let r = router
            .pay(
                key,
                idempotency_key,
                payment_body("acc_1", "10.00", idempotency_key),
            )
            .send()
            .await
            .ok()?;
        let served = region_of(&r);
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.ok()?;
        (served == region && (status == 201 || status == 200)).then_some(body)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_to_the_tenants_home_region_and_say_which_served() {
    let regions = Regions::start().await;
    regions.place("acme", "us", &["eu"]).await;
    let router = RouterProcess::start(&regions.router_args(&["--auto-failover=false"])).await;
    router.wait_ready().await;

    // acme lives in us; globex has no placement, so it lives in the router's own region.
    let acme = pay_until_served_by(&router, ACME_KEY, "route-acme-1", "us").await;
    let globex = pay_until_served_by(&router, GLOBEX_KEY, "route-globex-1", "eu").await;

    // The payments exist where the router said, and only there (asked as
    // the operator: the nodes answer routers and operators only).
    let client = regions
        .cluster
        .http_client_as("operator", once_tls::Role::Operator);
    let find = |node: String, key: &'static str, id: String| {
        let client = client.clone();
        async move {
            client
                .get(format!("{node}/payments/{id}"))
                .bearer_auth(key)
                .send()
                .await
                .expect("node answers")
                .status()
                .as_u16()
        }
    };
    let acme_id = acme["id"].as_str().expect("payment id").to_owned();
    let globex_id = globex["id"].as_str().expect("payment id").to_owned();
    assert_eq!(
        find(regions.us.url.clone(), ACME_KEY, acme_id.clone()).await,
        200
    );
    assert_eq!(
        find(regions.eu_url.clone(), ACME_KEY, acme_id.clone()).await,
        404
    );
    assert_eq!(
        find(regions.eu_url.clone(), GLOBEX_KEY, globex_id.clone()).await,
        200
    );
    assert_eq!(
        find(regions.us.url.clone(), GLOBEX_KEY, globex_id).await,
        404
    );

    // A read is routed the same way.
    let read = router
        .client
        .get(format!("{}/payments/{acme_id}", router.url))
        .bearer_auth(ACME_KEY)
        .send()
        .await
        .expect("router answers");
    assert_eq!(read.status(), 200);
    assert_eq!(region_of(&read), "us");

    // The payment and the read: attempts before the router's cache caught up
    // were served by (and counted for) eu.
    let answered = router
        .metric("router_requests_total", "region=\"us\"")
        .await;
    assert_eq!(answered, 2.0);
    assert_eq!(
        router
            .metric("router_request_duration_seconds_count", "region=\"us\"")
            .await,
        answered,
        "every answer is timed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_key_and_trace_context_reach_the_node() {
    let regions = Regions::start().await;
    let router = RouterProcess::start(&regions.router_args(&["--auto-failover=false"])).await;
    router.wait_ready().await;

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let first = router
        .pay(
            ACME_KEY,
            "trace-1",
            payment_body("acc_1", "10.00", "trace-1"),
        )
        .header("traceparent", &traceparent)
        .send()
        .await
        .expect("router answers");
    assert_eq!(first.status(), 201);
    assert_eq!(region_of(&first), "eu");
    // The node continued the caller's trace (its X-Trace-Id is the node's
    // own span's trace, reached through the router's span).
    assert_eq!(first.headers()["x-trace-id"], trace_id);
    let traceresponse = first.headers()["traceresponse"].to_str().unwrap();
    assert!(traceresponse.contains(trace_id), "{traceresponse}");
    let first = Answer::of(first).await;

    // The same Idempotency-Key again: the node replays (the key got there).
    let again = send(router.pay(
        ACME_KEY,
        "trace-1",
        payment_body("acc_1", "10.00", "trace-1"),
    ))
    .await;
    assert!(again.replayed, "the node saw the same key");
    assert_eq!(again.body, first.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_region_fails_over_to_its_standby() {
    let mut regions = Regions::start().await;
    let before = regions.place("acme", "eu", &["us"]).await;
    let router = RouterProcess::start(&regions.router_args(&[
        "--health-check-interval",
        "300ms",
        "--health-check-failures",
        "3",
    ]))
    .await;
    router.wait_ready().await;
    pay_until_served_by(&router, ACME_KEY, "failover-1", "eu").await;

    regions.kill_eu().await;

    let after = eventually(WAIT, || async {
        let p = regions.placement("acme").await;
        (p.epoch > before.epoch).then_some(p)
    })
    .await;
    assert_eq!(after.home, "us");
    assert_eq!(after.epoch, before.epoch + 1);
    assert_eq!(
        after.standbys,
        ["eu"],
        "the failed region is the last standby"
    );
    assert_eq!(after.preferred_home, "eu");
    // Published right after the move (the move is what clients wait for).
    eventually(WAIT, || async {
        let statuses = regions.store.regions().await.expect("store answers");
        statuses
            .contains(&("eu".to_owned(), RegionStatus::Down))
            .then_some(())
    })
    .await;

    // Requests succeed again, from the standby.
    pay_until_served_by(&router, ACME_KEY, "failover-2", "us").await;
    assert_eq!(
        router
            .metric("router_placement_moves_total", "trigger=\"automatic\"")
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_routers_racing_a_failover_move_the_tenant_once() {
    let mut regions = Regions::start().await;
    let before = regions.place("acme", "eu", &["us"]).await;
    let args = regions.router_args(&[
        "--health-check-interval",
        "200ms",
        "--health-check-failures",
        "2",
    ]);
    let (a, b) = tokio::join!(RouterProcess::start(&args), RouterProcess::start(&args));
    a.wait_ready().await;
    b.wait_ready().await;

    regions.kill_eu().await;

    // Both routers see the region down and act on it ...
    for router in [&a, &b] {
        eventually(WAIT, || async {
            (router
                .metric("router_region_failovers_total", "region=\"eu\"")
                .await
                >= 1.0)
                .then_some(())
        })
        .await;
    }
    // ... and the store applied exactly one move.
    let after = eventually(WAIT, || async {
        let p = regions.placement("acme").await;
        (p.home == "us").then_some(p)
    })
    .await;
    assert_eq!(after.epoch, before.epoch + 1, "one epoch bump, not two");
    // The winner counts its move after the store applied it: wait for it.
    let moves = || async {
        a.metric("router_placement_moves_total", "").await
            + b.metric("router_placement_moves_total", "").await
    };
    eventually(WAIT, || async { (moves().await >= 1.0).then_some(()) }).await;
    for router in [&a, &b] {
        assert_eq!(
            router
                .metric("router_region_failovers_total", "region=\"eu\"")
                .await,
            1.0,
            "each router declared eu down once"
        );
    }

    pay_until_served_by(&a, ACME_KEY, "race-1", "us").await;
    pay_until_served_by(&b, ACME_KEY, "race-2", "us").await;
    // Both routers now send acme to us, so both are past their failover
    // round: the loser skipped, it did not move the tenant again.
    assert_eq!(
        moves().await,
        1.0,
        "one router won the CAS, the other skipped"
    );
    assert_eq!(regions.placement("acme").await.epoch, after.epoch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_fails_a_region_over_and_back() {
    let regions = Regions::start().await;
    let before = regions.place("acme", "eu", &["us"]).await;
    regions.place("globex", "us", &["eu"]).await;
    let router = RouterProcess::start(&regions.router_args(&[
        "--auto-failover=false",
        "--health-check-interval",
        "500ms",
    ]))
    .await;
    router.wait_ready().await;

    // Once every member speaks wire version 4 the cluster moves to it, and
    // a failover is one evacuation (decision 0055).
    eventually(WAIT, || async {
        let status = regions.store.status_of(0).await.ok()?;
        (status.wire.cluster >= 4).then_some(())
    })
    .await;

    // Without the admin token: the node's 401.
    let refused = send(
        router
            .client
            .post(format!("{}/admin/failover", router.admin_api.url))
            .json(&serde_json::json!({ "region": "eu" })),
    )
    .await;
    assert_eq!(refused.status, 401);

    let failover = router.admin("/admin/failover", "eu").await;
    assert_eq!(
        failover.status,
        200,
        "{}",
        String::from_utf8_lossy(&failover.body)
    );
    assert_eq!(failover.json()["writtenAs"], "evacuation");
    let moved = failover.json()["moved"].clone();
    assert_eq!(moved.as_array().map(Vec::len), Some(1), "{moved}");
    assert_eq!(moved[0]["tenant"], "acme");
    assert_eq!(moved[0]["to"], "us");
    assert_eq!(moved[0]["epoch"], before.epoch + 1);
    pay_until_served_by(&router, ACME_KEY, "drill-1", "us").await;

    let failback = router.admin("/admin/failback", "eu").await;
    assert_eq!(
        failback.status,
        200,
        "{}",
        String::from_utf8_lossy(&failback.body)
    );
    assert_eq!(failback.json()["writtenAs"], "perTenant");
    let moved = failback.json()["moved"].clone();
    assert_eq!(
        moved.as_array().map(Vec::len),
        Some(1),
        "only acme prefers eu: {moved}"
    );
    assert_eq!(moved[0]["tenant"], "acme");
    assert_eq!(moved[0]["to"], "eu");
    assert_eq!(moved[0]["epoch"], before.epoch + 2);
    let home = regions.placement("acme").await;
    assert_eq!(
        (home.home.as_str(), home.standbys.as_slice()),
        ("eu", ["us".to_owned()].as_slice())
    );
    assert_eq!(regions.placement("globex").await.home, "us", "untouched");
    pay_until_served_by(&router, ACME_KEY, "drill-2", "eu").await;

    // A second failback finds nothing to move.
    let again = router.admin("/admin/failback", "eu").await;
    assert_eq!(again.json()["moved"], serde_json::json!([]));

    let table = send(
        router
            .client
            .get(format!("{}/admin/placements", router.admin_api.url))
            .bearer_auth(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(table.json()["placements"]["acme"]["home"], "eu");
}

/// No store needed: a tenant without a placement goes to the router's own
/// region, whose only node is not listening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_cut_off_at_the_router_fails_over_like_a_killed_one_refuses_an_early_failback_and_goes_home_after_healing()
 {
    let regions = Regions::start().await;
    let before = regions.place("acme", "us", &["eu"]).await;
    let router = RouterProcess::start(&regions.router_args(&[
        "--health-check-interval",
        "300ms",
        "--health-check-failures",
        "5",
        "--health-check-successes",
        "2",
    ]))
    .await;
    router.wait_ready().await;
    pay_until_served_by(&router, ACME_KEY, "cut-1", "us").await;

    let state = router.admin_api.cut(&["us"]).await;
    assert_eq!(state["unreachable_regions"], serde_json::json!(["us"]));
    // Before the health checks give up on us (5 rounds): as if its node
    // refused connections.
    let cut = send(router.pay(ACME_KEY, "cut-2", payment_body("acc_1", "10.00", "cut-2"))).await;
    assert_eq!(cut.status, 503);
    assert_eq!(cut.error_code(), "SERVICE_UNAVAILABLE");
    assert_eq!(cut.retry_after.as_deref(), Some("1"));

    let after = eventually(WAIT, || async {
        let p = regions.placement("acme").await;
        (p.epoch > before.epoch).then_some(p)
    })
    .await;
    assert_eq!(after.home, "eu", "failed over to the standby");
    pay_until_served_by(&router, ACME_KEY, "cut-2", "eu").await;

    // While the router still counts us down, a failback is refused: its
    // next health round would only move acme away again.
    let early = router.admin("/admin/failback", "us").await;
    assert_eq!(early.status, 409);
    assert_eq!(early.error_code(), "REGION_NOT_HEALTHY");
    assert_eq!(regions.placement("acme").await.home, "eu", "nothing moved");

    let healed = router.admin_api.cut(&[]).await;
    assert_eq!(healed["cut_regions"], serde_json::json!([]));
    eventually(WAIT, || async {
        router.admin_api.region_up("us").await.then_some(())
    })
    .await;
    let back = router.admin("/admin/failback", "us").await;
    assert_eq!(back.status, 200);
    pay_until_served_by(&router, ACME_KEY, "cut-3", "us").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_node_answers_503_with_retry_after_and_bad_requests_get_the_nodes_errors() {
    let db = TestDb::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path());
    let mut node_args = pki.issue("node", "us", Role::Node, &[]).flags();
    node_args.extend(["--api-callers".to_owned(), "routers".to_owned()]);
    let node_args: Vec<&str> = node_args.iter().map(String::as_str).collect();
    let node = NodeProcess::start(&db, &node_args, &[]).await;
    let closed = closed_addr();
    let mut args = vec![
        "--region".into(),
        "eu".into(),
        "--store-endpoints".into(),
        format!("{closed}"),
        "--nodes".into(),
        format!("eu=https://{closed},us={}", node.url),
        "--auto-failover=false".into(),
        "--body-limit".into(),
        "1024".into(),
    ];
    args.extend(pki.issue("router", "eu", Role::Router, &[]).flags());
    let router = RouterProcess::start(&args).await;

    let down = send(router.pay(ACME_KEY, "down-1", payment_body("acc_1", "1.00", "down-1"))).await;
    assert_eq!(down.status, 503);
    assert_eq!(down.error_code(), "SERVICE_UNAVAILABLE");
    assert_eq!(down.retry_after.as_deref(), Some("1"));

    // No key, or a wrong one: exactly the node's 401 (asked by an
    // operator: the node answers routers and operators only).
    let operator = pki
        .tls("operator", "us", Role::Operator)
        .http_client()
        .build()
        .unwrap();
    let from_node = send(
        operator
            .post(format!("{}/payments", node.url))
            .header("Idempotency-Key", "x")
            .body("{}"),
    )
    .await;
    for request in [
        router.client.post(format!("{}/payments", router.url)),
        router
            .client
            .post(format!("{}/payments", router.url))
            .bearer_auth("sk_test_not_a_key_at_all"),
    ] {
        let answer = send(request.header("Idempotency-Key", "x").body("{}")).await;
        assert_eq!(answer.status, 401);
        assert_eq!(answer.body, from_node.body);
    }

    // Too big to buffer: the node's 413 shape.
    let big = send(router.pay(ACME_KEY, "big-1", "x".repeat(2048))).await;
    assert_eq!(big.status, 413);
    assert_eq!(big.error_code(), "PAYLOAD_TOO_LARGE");
    node.kill().await;
}

/// A router whose placement is stale (refreshed hourly) forwards a new
/// claim to the former home region; that raft-mode node answers 421 naming
/// the new home, and the router re-reads the placement, re-sends once and
/// converges: the payment is made at the new home, and later requests go
/// there directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_router_gets_421_from_the_former_home_and_converges() {
    let eu_db = TestDb::new(Backend::Raft).await;
    let us_db = TestDb::new(Backend::Sqlite).await;
    let cluster = eu_db.store.as_ref().unwrap();
    let groups = cluster.store_groups();
    let store = groups.of_tenant("acme").await.unwrap();
    let store_args = eu_db.node_args();
    let callers = ["--api-callers", "routers"];
    let eu = NodeProcess::start_in("eu", &eu_db.url, &store_args, &callers, &[]).await;
    let us = NodeProcess::start_in("us", &us_db.url, &store_args, &callers, &[]).await;
    let placed = match store
        .set_placement("acme", 0, "eu", &["us".to_owned()])
        .await
        .unwrap()
    {
        Reply::Placement(p) => p,
        other => panic!("{other:?}"),
    };
    let args = router_args(
        cluster,
        "eu",
        (&eu.url, &us.url),
        &["--placement-refresh", "1h", "--auto-failover=false"],
    );
    let router = RouterProcess::start(&args).await;
    let first = router
        .pay(
            ACME_KEY,
            "k-before",
            payment_body("acc_1", "1.00", "order-before"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(first.headers()["x-once-region"], "eu");
    assert_eq!(first.status(), 201);

    // The placement moves behind the router's back.
    match store
        .set_placement("acme", placed.epoch, "us", &["eu".to_owned()])
        .await
        .unwrap()
    {
        Reply::Placement(p) => assert_eq!(p.epoch, 2),
        other => panic!("{other:?}"),
    }
    let moved = router
        .pay(
            ACME_KEY,
            "k-after",
            payment_body("acc_1", "2.00", "order-after"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        moved.headers()["x-once-region"],
        "us",
        "re-sent to the new home"
    );
    let moved = Answer::of(moved).await;
    assert_eq!(
        moved.status,
        201,
        "{}",
        String::from_utf8_lossy(&moved.body)
    );
    assert_eq!(us_db.count("SELECT COUNT(*) FROM payments").await, 1);
    assert_eq!(
        eu_db.count("SELECT COUNT(*) FROM payments").await,
        1,
        "nothing new at the former home"
    );
    let again = router
        .pay(
            ACME_KEY,
            "k-later",
            payment_body("acc_1", "3.00", "order-later"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        again.headers()["x-once-region"],
        "us",
        "the router converged"
    );
    assert_eq!(again.status(), 201);
    let misdirected = metric(
        &reqwest::Client::new(),
        &router.admin_api.url,
        "router_misdirected_total",
    )
    .await;
    assert_eq!(
        misdirected, 1.0,
        "the one 421 (k-after at the former home) was counted"
    );
}

/// A client that presents `files`' certificate and does not check the
/// server's: whatever refuses it is the server.
fn presenting(files: &once_tls::TlsFiles) -> reqwest::Client {
    let mut pem = std::fs::read(&files.cert).unwrap();
    pem.extend(std::fs::read(&files.key).unwrap());
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .identity(reqwest::Identity::from_pem(&pem).unwrap())
        .build()
        .unwrap()
}

/// A node behind routers (`--api-callers routers`) speaks mutual TLS and
/// answers routers and operators only: plain HTTP, no client certificate
/// and another CA's certificate get no answer at all; a node's or a store
/// member's certificate of the right CA gets `403 FORBIDDEN` and makes
/// nothing; the router, presenting its own certificate, makes the payment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_behind_routers_answers_routers_only_over_mutual_tls() {
    let regions = Regions::start().await;
    let node = regions.eu_url.clone();
    assert!(node.starts_with("https://"), "{node}");
    let ready = format!("{node}/readyz");

    let plain = ready.replacen("https://", "http://", 1);
    status_of(&reqwest::Client::new(), &plain)
        .await
        .expect_err("plain HTTP got an answer");
    let anonymous = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    status_of(&anonymous, &ready)
        .await
        .expect_err("a client without a certificate got an answer");
    let elsewhere = tempfile::tempdir().unwrap();
    let foreign = TestPki::new(elsewhere.path()).issue("router", "test", Role::Router, &[]);
    status_of(&presenting(&foreign), &ready)
        .await
        .expect_err("another CA's router certificate got an answer");

    // The right CA, the wrong roles: refused before anything is made.
    for (name, role) in [("other-node", Role::Node), ("member", Role::StoreMember)] {
        let client = regions.cluster.http_client_as(name, role);
        let refused = send(
            client
                .post(format!("{node}/payments"))
                .bearer_auth(GLOBEX_KEY)
                .header("Idempotency-Key", "mtls-1")
                .header("Content-Type", "application/json")
                .body(payment_body("acc_1", "1.00", "mtls-1")),
        )
        .await;
        assert_eq!(refused.status, 403, "{role:?}");
        assert_eq!(refused.error_code(), "FORBIDDEN", "{role:?}");
        assert_eq!(status_of(&client, &ready).await, Ok(403), "{role:?}");
    }
    let operator = regions.cluster.http_client_as("operator", Role::Operator);
    let listed: serde_json::Value = operator
        .get(format!("{node}/payments"))
        .bearer_auth(GLOBEX_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["data"], serde_json::json!([]), "{listed}");

    // Through the router (globex has no placement: the router's region).
    let router = RouterProcess::start(&regions.router_args(&["--auto-failover=false"])).await;
    router.wait_ready().await;
    let made = send(router.pay(
        GLOBEX_KEY,
        "mtls-1",
        payment_body("acc_1", "1.00", "mtls-1"),
    ))
    .await;
    assert_eq!(made.status, 201, "{}", String::from_utf8_lossy(&made.body));
}

/// A router with `--public-tls-cert` serves its public API over TLS with
/// that certificate (any CA the clients trust; no client certificate
/// asked): a client trusting the CA makes a payment, plain HTTP gets no
/// answer, and a router with a certificate refuses `http://` node URLs at
/// start (exit 64).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_serves_its_public_api_over_tls_and_forwards_to_nodes_over_mutual_tls_only() {
    let regions = Regions::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = WebCa::new("payments.example CA");
    let public = ca.server(&["localhost", "127.0.0.1"]);
    let (cert, key) = (dir.path().join("api.pem"), dir.path().join("api-key.pem"));
    std::fs::write(&cert, &public.cert_pem).unwrap();
    std::fs::write(&key, &public.key_pem).unwrap();
    // Its owner's only: a key file others may read is refused at start.
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let router = RouterProcess::start(&regions.router_args(&[
        "--auto-failover=false",
        "--public-tls-cert",
        cert.to_str().unwrap(),
        "--public-tls-key",
        key.to_str().unwrap(),
    ]))
    .await;
    assert!(router.url.starts_with("https://"), "{}", router.url);
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    http_ready(&client, &format!("{}/readyz", router.url), WAIT).await;
    let made = send(
        client
            .post(format!("{}/payments", router.url))
            .bearer_auth(GLOBEX_KEY)
            .header("Idempotency-Key", "public-tls-1")
            .header("Content-Type", "application/json")
            .body(payment_body("acc_1", "1.00", "public-tls-1")),
    )
    .await;
    assert_eq!(made.status, 201, "{}", String::from_utf8_lossy(&made.body));
    let plain = router.url.replacen("https://", "http://", 1);
    status_of(&reqwest::Client::new(), &format!("{plain}/readyz"))
        .await
        .expect_err("plain HTTP got an answer");

    let mut args = regions.router_args(&[]);
    let nodes = args.iter().position(|a| a == "--nodes").unwrap() + 1;
    args[nodes] = args[nodes].replace("https://", "http://");
    let refused = std::process::Command::new(ONCE)
        .arg("router")
        .args(&args)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("is plaintext"), "{stderr}");
}

/// A router that takes a region down after 2 failed rounds of 100 ms and
/// lets a standby take its tenants at once: shorter than any election.
const QUICK_DETECTION: &[&str] = &[
    "--health-check-interval",
    "100ms",
    "--health-check-failures",
    "2",
    "--health-check-settle",
    "0s",
];

/// `/readyz` of `node`, probed as the router does it.
async fn probe_readyz(http: &reqwest::Client, node: &NodeProcess) -> Option<reqwest::Response> {
    http.get(format!("{}/readyz", node.admin_url))
        .header(once_edge::ops::ANSWER_WITHIN_HEADER, "100")
        .send()
        .await
        .ok()
}

/// A raft-store outage is no region's failure (decision 0056): with its
/// leader and a second member killed the store has no quorum until one
/// returns, every raft-mode node answers `/readyz` with a `503` waiting on
/// the shared store for far longer than this router's detection window (2
/// rounds of 100 ms), and no region is declared down. (An election alone
/// no longer shows: a node stays ready for two leases, decision 0066.) A
/// region killed together with the store's leader is failed over once the
/// store has a new one, to the standby that stayed eligible through the
/// election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_election_fails_no_region_over_but_a_region_killed_with_the_leader_is() {
    let mut eu_db = TestDb::new(Backend::Raft).await;
    let us_db = TestDb::new(Backend::Sqlite).await;
    let store_args = eu_db.node_args();
    let callers = ["--api-callers", "routers"];
    let eu = NodeProcess::start_in("eu", &eu_db.url, &store_args, &callers, &[]).await;
    let us = NodeProcess::start_in("us", &us_db.url, &store_args, &callers, &[]).await;
    let cluster = eu_db.store.as_mut().expect("raft mode has a store");
    let groups = cluster.store_groups();
    let store = groups.of_tenant("acme").await.unwrap();
    let Reply::Placement(before) = store
        .set_placement("acme", 0, "eu", &["us".to_owned()])
        .await
        .unwrap()
    else {
        panic!("placed")
    };
    let args = router_args(cluster, "us", (&eu.url, &us.url), QUICK_DETECTION);
    let router = RouterProcess::start(&args).await;
    router.wait_ready().await;
    pay_until_served_by(&router, ACME_KEY, "election-1", "eu").await;

    // The leader and a second member die: every node waits on the store
    // until the second comes back and a leader is elected, seen from the
    // nodes' own `/readyz` probed as the router does.
    let http = reqwest::Client::new();
    let leader = cluster.wait_for_leader(&cluster.ids()).await;
    let second = cluster.ids().into_iter().find(|id| *id != leader).unwrap();
    cluster.kill(leader).await;
    cluster.kill(second).await;
    for node in [&eu, &us] {
        eventually(WAIT, || async {
            let answer = probe_readyz(&http, node).await?;
            let header = answer.headers().get(once_edge::ops::WAITING_ON_HEADER);
            (answer.status() == 503 && header.is_some_and(|v| v == "shared-store")).then_some(())
        })
        .await;
    }
    cluster.spawn(second, None).await;
    let survivors: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    cluster.wait_for_leader(&survivors).await;
    eventually(WAIT, || async {
        let ready = |node: &NodeProcess| reqwest::get(format!("{}/readyz", node.admin_url));
        let (eu_ready, us_ready) = tokio::join!(ready(&eu), ready(&us));
        (eu_ready.ok()?.status() == 200 && us_ready.ok()?.status() == 200).then_some(())
    })
    .await;
    // Past the next round of checks, which now pass.
    pay_until_served_by(&router, ACME_KEY, "election-2", "eu").await;
    assert_eq!(
        router.metric("router_region_failovers_total", "").await,
        0.0,
        "a store outage is not a region down"
    );
    assert_eq!(store.placement("acme").await.unwrap(), Some(before.clone()));

    // The member comes back; then eu's node dies with the store's leader.
    cluster.spawn(leader, None).await;
    cluster.wait_for_convergence(&cluster.ids()).await;
    let leader = cluster.wait_for_leader(&cluster.ids()).await;
    eu.kill().await;
    cluster.kill(leader).await;
    let after = eventually(WAIT, || async {
        let p = store.placement("acme").await.ok()??;
        (p.epoch > before.epoch).then_some(p)
    })
    .await;
    assert_eq!((after.home.as_str(), after.epoch), ("us", before.epoch + 1));
    assert_eq!(
        router
            .metric("router_region_failovers_total", "region=\"us\"")
            .await,
        0.0,
        "us stayed up through the election"
    );
    pay_until_served_by(&router, ACME_KEY, "election-3", "us").await;
}

/// Regions `eu` and `us`, their nodes on a three-member store (members 1,
/// 2, 3 in `eu`, `us`, `ap`) with a group `us` led from `us`, tenant `acme`
/// in it and homed in `us` (standby `eu`), each node asking its own
/// region's member first, and a router with [`QUICK_DETECTION`].
struct GroupRegions {
    cluster: Cluster,
    store: Arc<StoreClient>,
    /// `acme`'s placement before anything happened.
    before: Placement,
    eu: NodeProcess,
    us: NodeProcess,
    router: RouterProcess,
    http: reqwest::Client,
    _dbs: [TestDb; 2],
}

impl GroupRegions {
    async fn start() -> Self {
        let cluster = Cluster::start_with(
            3,
            &[
                "--peer-regions",
                "1=eu,2=us,3=ap",
                "--groups",
                "us",
                "--preferred-leader",
                "1",
            ],
            |_| vec![],
        )
        .await;
        group_led_by(&cluster, "us", 2).await;
        let directory = cluster.client(cluster.client_options());
        assert!(matches!(
            assign(&directory, "acme", "us").await,
            Reply::Assigned { .. }
        ));
        let store = cluster
            .store_groups()
            .of_tenant("acme")
            .await
            .unwrap()
            .clone();
        let Reply::Placement(before) = store
            .set_placement("acme", 0, "us", &["eu".to_owned()])
            .await
            .unwrap()
        else {
            panic!("placed")
        };
        let node_in = |region: &str, nearest: u64| {
            let endpoints: Vec<String> = std::iter::once(nearest)
                .chain(cluster.ids().into_iter().filter(|id| *id != nearest))
                .map(|id| cluster.members[&id].endpoint())
                .collect();
            let mut args: Vec<String> = [
                "--idempotency-store",
                "raft",
                "--store-endpoints",
                &endpoints.join(","),
            ]
            .map(str::to_owned)
            .into();
            args.extend(cluster.store_groups_flags());
            args.extend(behind_routers(&cluster));
            let region = region.to_owned();
            async move {
                let db = TestDb::new(Backend::Sqlite).await;
                let node = NodeProcess::start_in(&region, &db.url, &args, &[], &[]).await;
                (node, db)
            }
        };
        let (eu, eu_db) = node_in("eu", 1).await;
        let (us, us_db) = node_in("us", 2).await;
        let args = router_args(&cluster, "eu", (&eu.url, &us.url), QUICK_DETECTION);
        let router = RouterProcess::start(&args).await;
        router.wait_ready().await;
        pay_until_served_by(&router, ACME_KEY, "group-1", "us").await;
        Self {
            cluster,
            store,
            before,
            eu,
            us,
            router,
            http: reqwest::Client::new(),
            _dbs: [eu_db, us_db],
        }
    }

    async fn failovers(&self, filter: &str) -> f64 {
        self.router
            .metric("router_region_failovers_total", filter)
            .await
    }
}

/// An outage of one region's group is no region's failure either (decision
/// 0065): while the group `us` — which only `us`'s node judges — has no
/// leader (its voters cut to members 2 and 3, and 2 killed, until it
/// returns), `us` waits on it and `eu`, ready, does not reach it either,
/// so `us` stays up however many rounds it lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_of_a_regions_group_fails_no_region_over() {
    let mut regions = GroupRegions::start().await;

    // The directory (1, 2, 3) keeps its leader throughout.
    let group_admins = group_endpoints(&regions.cluster.admin_endpoints(), "us");
    admin::change_membership(&regions.cluster.operator(), &group_admins, vec![2, 3])
        .await
        .expect("group us on members 2 and 3");
    regions.cluster.kill(2).await;
    let GroupRegions { http, us, eu, .. } = &regions;
    // us waits on its group, seen as the router sees it, for ten of the
    // router's rounds in a row: five times what it takes to go down.
    let waiting_since = std::sync::Mutex::new(None::<std::time::Instant>);
    let waiting = eventually(WAIT, || async {
        let answer = probe_readyz(http, us).await?;
        let waits = once_edge::ops::StoreGroups::waiting_on_of(answer.headers());
        let mut since = waiting_since.lock().unwrap();
        if answer.status() != 503 || !waits.as_ref().is_some_and(|w| w.contains("us")) {
            *since = None;
            return None;
        }
        let since = since.get_or_insert_with(std::time::Instant::now);
        (since.elapsed() >= Duration::from_secs(1)).then_some(waits)
    })
    .await;
    assert_eq!(
        waiting,
        Some(["us".to_owned()].into()),
        "the directory has its leader"
    );
    let eu_reach = probe_readyz(http, eu).await.expect("eu answers");
    assert_eq!(eu_reach.status(), 200);
    let reach = once_edge::ops::StoreGroups::in_reach_of(eu_reach.headers());
    assert!(
        reach
            .as_ref()
            .is_some_and(|r| r.contains("directory") && !r.contains("us")),
        "{reach:?}"
    );

    regions.cluster.spawn(2, None).await;
    pay_until_served_by(&regions.router, ACME_KEY, "group-2", "us").await;
    assert_eq!(
        regions.failovers("").await,
        0.0,
        "a group's outage is not a region down"
    );
    assert_eq!(
        regions.store.placement("acme").await.unwrap(),
        Some(regions.before.clone())
    );
}

/// A region whose own member is cut off, while the other regions reach
/// the groups it waits on, is failed over (decision 0065); its member's
/// restart is not (it catches up while the node judges by a member that
/// has heard the leader).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_cut_off_from_its_group_is_failed_over_but_not_for_its_members_restart() {
    let mut regions = GroupRegions::start().await;
    regions.cluster.kill(2).await;
    regions.cluster.spawn(2, None).await;
    group_led_by(&regions.cluster, "us", 2).await;
    pay_until_served_by(&regions.router, ACME_KEY, "cut-1", "us").await;
    assert_eq!(
        regions.failovers("").await,
        0.0,
        "a member's restart is not a region down"
    );

    // us partitioned as the drill does it: its member isolated, the other
    // members refusing it, us's node included. The others elect a leader
    // of group us among themselves and reach it: us is cut off.
    let operator = regions.cluster.operator();
    let members = &regions.cluster.members;
    let partition = |cut: bool| {
        let operator = &operator;
        async move {
            admin::set_partition(operator, &members[&2].admin_endpoint(), cut)
                .await
                .unwrap();
            let cut_regions = if cut { vec!["us".to_owned()] } else { vec![] };
            for id in [1, 3] {
                admin::set_cut_regions(operator, &members[&id].admin_endpoint(), &cut_regions)
                    .await
                    .unwrap();
            }
        }
    };
    partition(true).await;
    let before = &regions.before;
    let after = eventually(WAIT, || async {
        let p = regions.store.placement("acme").await.ok()??;
        (p.epoch > before.epoch).then_some(p)
    })
    .await;
    assert_eq!((after.home.as_str(), after.epoch), ("eu", before.epoch + 1));
    assert_eq!(regions.failovers("region=\"us\"").await, 1.0);
    assert_eq!(regions.failovers("region=\"eu\"").await, 0.0);
    partition(false).await;
    pay_until_served_by(&regions.router, ACME_KEY, "cut-2", "eu").await;
}

/// Decision 0085 (RELIABILITY.md finding 20) with real processes: `us`'s
/// node SIGSTOPped for a second — ten of the router's 100 ms rounds, five
/// times its threshold — while raft-store's members still hear `us`'s
/// member is taken for busy: the streak is withheld, nothing is declared
/// down and `acme` stays home. Then `us` dies outright (node and member
/// SIGKILLed): declared down on the node's refusals and failed over, as
/// fast as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_whose_member_the_store_hears_is_not_failed_over_but_its_killed_region_is() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let mut regions = GroupRegions::start().await;
    let node = Pid::from_raw(regions.us.process.pid() as i32);
    kill(node, Signal::SIGSTOP).unwrap();
    // The fault's length, not a wait for a condition: under the 2 s the
    // router waits without sure evidence.
    tokio::time::sleep(Duration::from_secs(1)).await;
    kill(node, Signal::SIGCONT).unwrap();
    pay_until_served_by(&regions.router, ACME_KEY, "busy-1", "us").await;
    let down = |filter: &'static str| {
        regions
            .router
            .metric("router_region_down_declarations_total", filter)
    };
    assert!(
        regions
            .router
            .metric("router_region_down_withheld_total", "region=\"us\"")
            .await
            >= 1.0,
        "the streak reached the threshold"
    );
    assert_eq!(down("region=\"us\"").await, 0.0, "a paused node alone");
    assert_eq!(
        regions.store.placement("acme").await.unwrap(),
        Some(regions.before.clone())
    );

    regions.us.process.kill().await;
    regions.cluster.kill(2).await;
    let before = &regions.before;
    let after = eventually(WAIT, || async {
        let p = regions.store.placement("acme").await.ok()??;
        (p.epoch > before.epoch).then_some(p)
    })
    .await;
    assert_eq!((after.home.as_str(), after.epoch), ("eu", before.epoch + 1));
    assert_eq!(
        down("region=\"us\",evidence=\"nothing_listens\"").await
            + down("region=\"us\",evidence=\"store_lost_its_member\"").await,
        1.0
    );
}

/// Issue 48: one peer held 4,096 connections to a router and every other
/// client was refused. Now a peer (127.0.0.2) gets its share of the public
/// listener (a quarter of `--max-connections`), its further connections are
/// closed at once and counted, and a client on 127.0.0.1 still pays through
/// the router to its node (whose public listener sees the router by its
/// certificate, outside any address's share).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_holding_connections_past_its_share_of_a_router_leaves_room_for_a_paying_client() {
    let regions = Regions::start().await;
    let router = RouterProcess::start(&regions.router_args(&[
        "--auto-failover=false",
        "--max-connections",
        "40",
    ]))
    .await;
    router.wait_ready().await;
    let to: std::net::SocketAddr = router
        .url
        .trim_start_matches("http://")
        .parse()
        .expect("the router's address");
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..30 {
        match crate::edge::held_from([127, 0, 0, 2], to).await {
            Some(stream) => held.push(stream),
            None => refused += 1,
        }
    }
    assert_eq!(held.len(), 10, "the peer holds its share of 10 of 40");
    assert_eq!(refused, 20);
    assert_eq!(
        router
            .metric(
                "edge_connections_refused_total",
                "listener=\"public\",reason=\"peer_cap\"",
            )
            .await,
        20.0
    );
    let paid = router
        .pay(ACME_KEY, "held-1", payment_body("acc_1", "1.00", "held-1"))
        .send()
        .await
        .expect("router answers");
    assert_eq!(paid.status(), 201, "a client from 127.0.0.1 pays");
    // The peer's connections are still open: holding its share is allowed.
    for stream in &mut held {
        assert!(!once_test_support::raw::closed_within(stream, Duration::from_millis(10)).await);
    }
}
