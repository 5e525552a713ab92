//! The whole drill, `run`, against a small in-process stand-in for a
//! cluster: a router/node that keeps payments in a real SQLite `payments`
//! table (the migration's schema), a provider ledger, and a store member
//! that leads and serves the node's idempotency records (`GET
//! /admin/records`, as raft-store encodes them) but has no partition
//! switch; a second region's member, listed first, is a follower that has
//! applied nothing yet; a control endpoint records the regions it is asked
//! to restart. It proves the drill's plumbing end to end:
//! load with retries, a missing switch reported rather than pretended,
//! failback, the final replays, evidence gathering (store records from the
//! leader), checks and report files — that a node that replays a changed
//! body is caught, and that a kill which reached only some of the region's
//! processes still counts and restarts the region at failback.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use once_drill::{DrillArgs, fault::FaultMode};
use once_store_client::command::{self as store, Record};
use once_store_client::protocol::{Answer, Read, ReadReply};
use once_store_client::wire::Postcard;
use once_test_support::process::Process;
use once_test_support::serve::serve;
use serde_json::{Value, json};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};

/// (tenant, key) → (request body, status, response body)
type Records = HashMap<(String, String), (Bytes, u16, String)>;
/// (tenant, account, reference) → payment id
type BusinessKeys = HashMap<(String, String, String), String>;

#[derive(Clone)]
struct Fake {
    db: SqlitePool,
    ledger: Arc<Mutex<Vec<Value>>>,
    records: Arc<Mutex<Records>>,
    business_keys: Arc<Mutex<BusinessKeys>>,
    requests: Arc<AtomicU64>,
    /// Misbehave: render a replay afresh instead of returning the stored body.
    rerender_replays: bool,
    /// The data keys the fake seals its stored answers with (written to
    /// the cluster's key file, as `once up` does).
    keys: Arc<once_seal::KeyRing>,
}

fn json_response(status: u16, body: String, replayed: bool) -> Response {
    let mut response = (
        StatusCode::from_u16(status).unwrap(),
        [
            ("content-type", "application/json"),
            ("x-once-region", "eu-west"),
        ],
        body,
    )
        .into_response();
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", "true".parse().unwrap());
    }
    response
}

async fn create_payment(State(fake): State<Fake>, headers: HeaderMap, body: Bytes) -> Response {
    // Every 7th request fails before doing anything: clients must retry.
    if fake.requests.fetch_add(1, Ordering::Relaxed) % 7 == 6 {
        return json_response(
            503,
            r#"{"errorCode":"SERVICE_UNAVAILABLE","message":"shed"}"#.into(),
            false,
        );
    }
    let tenant = headers["authorization"]
        .to_str()
        .unwrap()
        .trim_start_matches("Bearer key-")
        .to_owned();
    let key = headers["idempotency-key"].to_str().unwrap().to_owned();
    let command: Value = serde_json::from_slice(&body).unwrap();
    let (account, reference) = (
        command["accountId"].as_str().unwrap().to_owned(),
        command["merchantReference"].as_str().unwrap().to_owned(),
    );
    if let Some((first, status, response)) = fake
        .records
        .lock()
        .unwrap()
        .get(&(tenant.clone(), key.clone()))
        .cloned()
    {
        if first != body {
            return json_response(
                409,
                r#"{"errorCode":"IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST","message":"no"}"#
                    .into(),
                false,
            );
        }
        let response = if fake.rerender_replays {
            response.replace("\"createdAt\":\"t0\"", "\"createdAt\":\"t1\"")
        } else {
            response
        };
        return json_response(status, response, true);
    }
    let id = format!("pay_{}", uuid::Uuid::now_v7().simple());
    let holder = fake
        .business_keys
        .lock()
        .unwrap()
        .entry((tenant.clone(), account.clone(), reference.clone()))
        .or_insert_with(|| id.clone())
        .clone();
    let (status, response) = if holder != id {
        (409, json!({"errorCode": "DUPLICATE_MERCHANT_REFERENCE", "message": "dup", "paymentId": holder}).to_string())
    } else {
        sqlx::query("INSERT INTO payments (id, tenant_id, account_id, merchant_reference, amount_minor, currency, channel, status, provider_key, region, created_at, updated_at) VALUES (?, ?, ?, ?, 1000, 'EUR', 'web', 'succeeded', ?, 'eu-west', 0, 0)")
            .bind(&id).bind(&tenant).bind(&account).bind(&reference).bind(format!("provider_payment_{id}"))
            .execute(&fake.db).await.unwrap();
        fake.ledger.lock().unwrap().push(json!({
            "id": format!("ch_{id}"), "idempotencyKey": format!("provider_payment_{id}"),
            "status": "succeeded", "declineCode": null, "accountId": account,
            "amountMinor": 1000, "currency": "EUR", "merchantReference": reference, "requests": 1,
        }));
        (
            201,
            json!({"object": "payment", "id": id, "status": "succeeded", "createdAt": "t0"})
                .to_string(),
        )
    };
    fake.records
        .lock()
        .unwrap()
        .insert((tenant, key), (body, status, response.clone()));
    json_response(status, response, false)
}

/// The fake node's finished records as raft-store keeps them: a `201`
/// completed with its payment and business key, a `409` duplicate failed
/// replayably.
fn store_record(
    keys: &once_seal::KeyRing,
    tenant: &str,
    key: &str,
    status: u16,
    response: &str,
) -> Record {
    let body: Value = serde_json::from_str(response).unwrap();
    let created = status == 201;
    let scope = store::Scope {
        tenant: tenant.to_owned(),
        principal: "demo".into(),
        operation: "create_payment".into(),
        key: key.to_owned(),
    };
    let answer = store::StoredResponse {
        status,
        headers: Vec::new(),
        body: response.as_bytes().to_vec(),
        schema_version: 2,
    };
    Record {
        response: Some(store::Sealed::seal_answer(keys, &scope, &answer)),
        scope,
        fingerprint_version: 1,
        fingerprint: String::new(),
        status: if created {
            store::Status::Completed
        } else {
            store::Status::FailedReplayable
        },
        step: store::Step::Completed,
        fence: 1,
        locked_until: 0,
        payment_id: created.then(|| body["id"].as_str().unwrap().to_owned()),
        provider_key: None,
        business_key: None,
        payload: None,
        error_code: None,
        trace_id: None,
        region: "eu-west".into(),
        takeovers: 0,
        created_at: 0,
        updated_at: 0,
        expires_at: None,
        purge_after: None,
    }
}

async fn store_records(State(fake): State<Fake>) -> Postcard<Vec<Record>> {
    let records = fake.records.lock().unwrap();
    Postcard(
        records
            .iter()
            .map(|((tenant, key), (_, status, response))| {
                store_record(&fake.keys, tenant, key, *status, response)
            })
            .collect(),
    )
}

/// `GET /api/status` of a member: `id`, whom it follows, what it applied.
fn member_status(id: u64, leader: u64, applied: u64) -> Value {
    serde_json::to_value(once_store_client::protocol::Status {
        id,
        raft_addr: String::new(),
        api_addr: String::new(),
        state: if id == leader { "Leader" } else { "Follower" }.into(),
        leader: Some(leader),
        term: 2,
        last_log_index: Some(applied),
        committed_index: Some(applied),
        applied_index: Some(applied),
        snapshot_index: None,
        purged_index: None,
        voters: vec![1, 2],
        learners: Vec::new(),
        ..Default::default()
    })
    .unwrap()
}

/// The regions `once up`'s control endpoint was asked to restart.
type Restarts = Arc<Mutex<Vec<String>>>;

async fn fake_cluster(
    dir: &std::path::Path,
    rerender_replays: bool,
    pids: (u32, u32),
) -> std::path::PathBuf {
    fake_cluster_with_control(dir, rerender_replays, pids)
        .await
        .0
}

async fn fake_cluster_with_control(
    dir: &std::path::Path,
    rerender_replays: bool,
    pids: (u32, u32),
) -> (std::path::PathBuf, Restarts) {
    let db_path = dir.join("eu-west.db");
    let db = payments_database(&db_path).await;
    // The other region's database: nothing was ever served there.
    let other_db_path = dir.join("us-east.db");
    payments_database(&other_db_path).await.close().await;
    let fake = Fake {
        db,
        ledger: Arc::default(),
        records: Arc::default(),
        business_keys: Arc::default(),
        requests: Arc::default(),
        rerender_replays,
        keys: Arc::new(once_seal::KeyRing::generate()),
    };
    let keys_path = dir.join("data-keys");
    fake.keys.create_file(&keys_path).unwrap();
    let ledger = fake.ledger.clone();
    let provider = serve(Router::new().route(
        "/charges",
        get(move || {
            let ledger = ledger.clone();
            async move { axum::Json(ledger.lock().unwrap().clone()) }
        }),
    ))
    .await;
    let router = serve(
        Router::new()
            .route("/payments", post(create_payment))
            .route("/admin/failback", post(|| async { "{}" }))
            .with_state(fake.clone()),
    )
    .await;
    // Store members from before the partition switch existed: the leader,
    // holding the fake node's records, and a follower that has applied
    // nothing (a drill reading it would find every payment missing).
    let store = serve(
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route(
                once_store_client::protocol::STATUS_PATH,
                get(|| async { axum::Json(member_status(1, 1, 500)) }),
            )
            .route(
                once_store_client::protocol::RECORDS_PATH,
                get(store_records),
            )
            // The placements: every tenant at home in eu-west (where the
            // drill's homecoming finds them); every other read is the
            // routers' view of health: every region is healthy (what a
            // failback waits for).
            .route(
                once_store_client::protocol::READ_PATH,
                post(|body: Bytes| async move {
                    let read: Read = once_store_client::wire::decode(&body).unwrap();
                    Postcard(Answer::Done(match read {
                        Read::Placements => ReadReply::Placements(
                            ["acme", "globex"]
                                .map(|tenant| {
                                    (
                                        tenant.to_owned(),
                                        store::Placement {
                                            home: "eu-west".into(),
                                            standbys: vec!["us-east".into()],
                                            epoch: 1,
                                            preferred_home: "eu-west".into(),
                                        },
                                    )
                                })
                                .to_vec(),
                        ),
                        _ => ReadReply::Regions(vec![
                            ("eu-west".to_owned(), store::RegionStatus::Healthy),
                            ("us-east".to_owned(), store::RegionStatus::Healthy),
                        ]),
                    }))
                }),
            )
            .with_state(fake),
    )
    .await;
    let restarts = Restarts::default();
    let control = serve(
        Router::new()
            .route(
                "/regions/{name}/restart",
                post(
                    |State(restarts): State<Restarts>, Path(name): Path<String>| async move {
                        restarts.lock().unwrap().push(name);
                        axum::Json(json!({"restarted": ["node"]}))
                    },
                ),
            )
            .with_state(restarts.clone()),
    )
    .await;
    let follower = serve(
        Router::new()
            .route(
                once_store_client::protocol::STATUS_PATH,
                get(|| async { axum::Json(member_status(2, 1, 3)) }),
            )
            .route(
                once_store_client::protocol::RECORDS_PATH,
                get(|| async { Postcard(Vec::<Record>::new()) }),
            ),
    )
    .await;
    let cluster = json!({
        "control": {"url": format!("http://{control}"), "token": "ctl_fake_control_token"},
        "router": {"url": format!("http://{router}")},
        "provider": {"url": format!("http://{provider}")},
        "admin_token": "admin",
        "data_keys": keys_path,
        "tenants": [
            {"id": "acme", "api_key": "key-acme", "home_region": "eu-west"},
            {"id": "globex", "api_key": "key-globex", "home_region": "eu-west"},
        ],
        "regions": [{
            "name": "us-east",
            "node": {"url": format!("http://{router}")},
            "store": {"api_url": format!("http://{follower}")},
            "database_url": format!("sqlite://{}", other_db_path.display()),
        }, {
            "name": "eu-west",
            "node": {"url": format!("http://{router}"), "pid": pids.0},
            "store": {"api_url": format!("http://{store}"), "pid": pids.1},
            "database_url": format!("sqlite://{}", db_path.display()),
        }],
    });
    let path = dir.join("cluster.json");
    std::fs::write(&path, cluster.to_string()).unwrap();
    (path, restarts)
}

/// A SQLite database with the node's schema at `path`.
async fn payments_database(path: &std::path::Path) -> SqlitePool {
    let db = SqlitePool::connect_with(
        SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true),
    )
    .await
    .unwrap();
    let schema = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../migrations/sqlite/0001_payments_and_idempotency.sql"
    ))
    .unwrap();
    sqlx::raw_sql(&schema).execute(&db).await.unwrap();
    db
}

/// A stand-in process the drill SIGKILLed is gone by the time it returns;
/// this is only the slack of reaping it.
const KILLED: std::time::Duration = std::time::Duration::from_secs(10);

fn args(cluster: std::path::PathBuf, out: std::path::PathBuf) -> DrillArgs {
    DrillArgs {
        cluster,
        region: "eu-west".into(),
        mode: FaultMode::Partition,
        duration: 2,
        rate: 25,
        failback: true,
        out: Some(out),
        grace: 5,
        failback_timeout: 5,
    }
}

#[tokio::test]
async fn a_drill_against_a_correct_cluster_holds_every_invariant_and_says_the_switch_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = fake_cluster(dir.path(), false, (0, 0)).await;
    let outcome = once_drill::run(args(cluster, dir.path().join("report")))
        .await
        .unwrap();

    assert!(outcome.invariants_held, "{:#?}", outcome.report.checks);
    assert!(!outcome.fault_injected);
    let error = outcome.report.fault.error.clone().unwrap();
    assert!(error.contains("HTTP 404"), "{error}");
    // Every invariant held, but of a load without a failover: the drill
    // fails (the binary exits non-zero) and its headline says why.
    assert!(!outcome.passed, "{}", outcome.verdict);
    assert!(
        outcome.verdict.contains("fault was NOT injected"),
        "{}",
        outcome.verdict
    );
    let m = &outcome.report.measurements;
    assert!(m.operations > 40, "{m:#?}");
    assert_eq!(m.unanswered, 0, "{m:#?}");
    assert!(m.errors.contains_key("503 SERVICE_UNAVAILABLE"), "{m:#?}");
    assert!(
        m.errors.contains_key("409 DUPLICATE_MERCHANT_REFERENCE"),
        "{m:#?}"
    );
    assert!(
        m.errors
            .contains_key("409 IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST"),
        "{m:#?}"
    );
    assert!(
        outcome
            .report
            .failback
            .as_ref()
            .unwrap()
            .home_again_at
            .is_some()
    );
    assert!(outcome.report.evidence.payment_rows_by_region["eu-west"] > 30);
    assert_eq!(outcome.report.evidence.gaps, Vec::<String>::new());
    assert!(outcome.report.evidence.store_records > Some(30));
    let member = outcome.report.evidence.store_member.clone().unwrap();
    assert!(member.ends_with("(leader)"), "{member}");

    // After the failback, every stored answer was asked for once more.
    let evidence: Value =
        serde_json::from_slice(&std::fs::read(outcome.report_dir.join("evidence.json")).unwrap())
            .unwrap();
    let home_again = outcome.report.failback.as_ref().unwrap().home_again_at;
    let (operations, attempts) = (
        evidence["log"]["operations"].as_array().unwrap(),
        evidence["log"]["attempts"].as_array().unwrap(),
    );
    let stored = |status: &Value, code: &Value| {
        status == 201 || status == 402 || (status == 409 && code == "DUPLICATE_MERCHANT_REFERENCE")
    };
    let with_stored_answers = operations
        .iter()
        .filter(|op| op["intent"]["kind"] != "replay")
        .filter(|op| {
            attempts
                .iter()
                .any(|a| a["op"] == op["id"] && stored(&a["status"], &a["error_code"]))
        })
        .count();
    let replayed_after_failback = operations
        .iter()
        .filter(|op| op["intent"]["kind"] == "replay")
        .filter(|op| {
            attempts
                .iter()
                .any(|a| a["op"] == op["id"] && a["sent_at"].as_u64() >= home_again)
        })
        .count();
    assert!(with_stored_answers > 30, "{with_stored_answers}");
    assert_eq!(replayed_after_failback, with_stored_answers);
    let md = std::fs::read_to_string(outcome.report_dir.join("report.md")).unwrap();
    assert!(md.contains("The fault was not injected"), "{md}");
    let headline = md.lines().next().unwrap_or_default();
    assert!(headline.contains("fault was NOT injected"), "{headline}");
    assert!(!headline.contains("every invariant held"), "{headline}");
    let json: Value =
        serde_json::from_slice(&std::fs::read(outcome.report_dir.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(json["invariants_held"], true);
    assert!(json["load_started_at"].as_u64().is_some(), "{json:#}");
    assert!(outcome.report_dir.join("evidence.json").exists());

    // The charts: SVG files beside the report, linked from report.md right
    // after the timeline, and inline in the self-contained report.html.
    for chart in ["throughput.svg", "latency.svg"] {
        let svg = std::fs::read_to_string(outcome.report_dir.join(chart)).unwrap();
        assert!(svg.starts_with("<svg"), "{chart}: {svg}");
        assert!(svg.trim_end().ends_with("</svg>"), "{chart}: {svg}");
        assert!(svg.contains("load ended"), "{chart}: {svg}");
        assert!(md.contains(&format!("]({chart})")), "{md}");
    }
    let charts_at = md.find("## Charts").expect("a Charts section");
    assert!(md.find("## Timeline").unwrap() < charts_at, "{md}");
    assert!(charts_at < md.find("## Measured").unwrap(), "{md}");
    assert!(md.contains("![Answers per second"), "{md}");
    let html = std::fs::read_to_string(outcome.report_dir.join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert_eq!(html.matches("<svg").count(), 2, "{html}");
    for section in ["Timeline", "Charts", "Measured", "Failback", "Checks"] {
        assert!(html.contains(&format!("<h2>{section}</h2>")), "{html}");
    }
    assert!(
        html.contains("<strong>The fault was not injected</strong>"),
        "{html}"
    );
    assert!(
        !html.contains("<script") && !html.contains("src=\""),
        "{html}"
    );
    assert!(html.contains("503 SERVICE_UNAVAILABLE"), "{html}");
}

#[tokio::test]
async fn a_cluster_that_replays_a_changed_body_fails_the_drill() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = fake_cluster(dir.path(), true, (0, 0)).await;
    let outcome = once_drill::run(args(cluster, dir.path().join("report")))
        .await
        .unwrap();

    assert!(outcome.invariant_broken());
    // Every replay differs from the answer first sent: faithful replay
    // compares them, and no order of the attempts explains them either.
    assert_eq!(
        outcome.failed_checks,
        vec!["faithful replay".to_owned(), "linearizable".to_owned()]
    );
}

#[tokio::test]
async fn kill_mode_sigkills_the_regions_node_and_store_processes() {
    use std::os::unix::process::ExitStatusExt;
    let mut node = Process::idle();
    let mut store = Process::idle();
    let dir = tempfile::tempdir().unwrap();
    let cluster = fake_cluster(dir.path(), false, (node.pid(), store.pid())).await;
    let mut args = args(cluster, dir.path().join("report"));
    args.mode = FaultMode::Kill;
    args.failback = false;
    let outcome = once_drill::run(args).await.unwrap();

    assert!(outcome.fault_injected, "{:#?}", outcome.report.fault);
    assert_eq!(node.exit_within(KILLED).await.signal(), Some(9));
    assert_eq!(store.exit_within(KILLED).await.signal(), Some(9));
    assert!(outcome.invariants_held);
    assert!(outcome.report.measurements.fault_at.is_some());
    // Injected and every invariant held: the drill passes, and its report
    // says where the tenants are (home: the fake store places them there).
    assert!(outcome.passed, "{}", outcome.verdict);
    assert_eq!(outcome.verdict, "every invariant held");
    assert!(
        outcome.report.homecoming.all_home(),
        "{:?}",
        outcome.report.homecoming
    );
}

#[tokio::test]
async fn a_kill_that_reaches_only_the_node_is_injected_and_the_region_restarted_at_failback() {
    use std::os::unix::process::ExitStatusExt;
    let mut node = Process::idle();
    let dir = tempfile::tempdir().unwrap();
    // pid 1 is never signalled: the store member cannot be killed.
    let (cluster, restarts) = fake_cluster_with_control(dir.path(), false, (node.pid(), 1)).await;
    let mut args = args(cluster, dir.path().join("report"));
    args.mode = FaultMode::Kill;
    let outcome = once_drill::run(args).await.unwrap();

    assert_eq!(node.exit_within(KILLED).await.signal(), Some(9));
    let fault = &outcome.report.fault;
    assert!(outcome.fault_injected, "{fault:#?}");
    assert!(
        fault
            .error
            .as_deref()
            .unwrap()
            .contains("store member pid 1"),
        "{fault:#?}"
    );
    assert!(
        fault.steps.iter().any(|s| s.starts_with("SIGKILL node")),
        "{fault:#?}"
    );
    assert_eq!(
        *restarts.lock().unwrap(),
        ["eu-west"],
        "the killed node is restarted"
    );
    assert!(
        outcome
            .report
            .failback
            .as_ref()
            .unwrap()
            .home_again_at
            .is_some(),
        "{:#?}",
        outcome.report.timeline
    );
    assert!(outcome.invariants_held, "{:#?}", outcome.report.checks);
    assert!(outcome.passed, "{}", outcome.verdict);
}

/// The drill's progress lines (`drill` events, one per timeline entry) as
/// they were emitted, with when.
#[derive(Clone, Default)]
struct Progress(Arc<Mutex<Vec<(std::time::Instant, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Progress {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct What(Option<String>);
        impl tracing::field::Visit for What {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "what" {
                    self.0 = Some(format!("{value:?}"));
                }
            }
        }
        let mut what = What(None);
        event.record(&mut what);
        if let Some(what) = what.0 {
            self.0
                .lock()
                .unwrap()
                .push((std::time::Instant::now(), what));
        }
    }
}

#[tokio::test]
async fn the_drill_prints_the_fault_when_it_happens_not_when_the_load_ends() {
    use tracing_subscriber::layer::SubscriberExt;
    let progress = Progress::default();
    // This test's thread only (the drill runs on it: a current-thread
    // runtime), so the other tests' lines are not mixed in.
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(progress.clone()));
    let dir = tempfile::tempdir().unwrap();
    let cluster = fake_cluster(dir.path(), false, (0, 0)).await;
    let mut args = args(cluster, dir.path().join("report"));
    args.duration = 3;
    args.failback = false;
    once_drill::run(args).await.unwrap();

    let lines = progress.0.lock().unwrap().clone();
    let when = |prefix: &str| {
        lines
            .iter()
            .find(|(_, what)| what.starts_with(prefix))
            .map(|(at, _)| *at)
            .unwrap_or_else(|| panic!("no {prefix:?} line: {lines:?}"))
    };
    // The fault comes at a third of the 3 s load, the end at 3 s: its line
    // is printed then, seconds before the load's end is.
    let fault = when("fault NOT injected");
    let load_finished = when("load finished");
    assert!(
        load_finished.duration_since(fault) > std::time::Duration::from_millis(1500),
        "the fault's line came {:?} before the load's end: {lines:?}",
        load_finished.duration_since(fault)
    );
}
