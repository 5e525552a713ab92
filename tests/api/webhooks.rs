//! Webhooks end to end (decisions 0091, 0092): a real `once node` process
//! delivering to a receiver in the test (axum on 127.0.0.1), every delivery
//! checked with `once-client`'s verifier and deduplicated by event id, as
//! docs/api.md tells merchants to.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post as post_route;
use once_client::webhooks::{Tolerance, verify};
use once_test_support::wait::until;
use serde_json::Value;

use crate::helpers::*;
use crate::on_backends;

on_backends!(
    [sqlite, postgres]
    a_receiver_that_fails_first_gets_every_event_once_it_recovers,
    a_node_killed_mid_delivery_loses_no_event,
    a_hanging_endpoint_does_not_hold_up_payments_or_other_endpoints,
    a_delivery_out_of_retries_is_dead_lettered_and_redriven,
    during_a_rotation_both_secrets_verify,
    endpoints_are_listed_deleted_and_checked_per_tenant,
    a_url_into_the_nodes_own_network_is_refused_and_a_name_resolving_there_reaches_nothing,
    events_past_their_30_days_are_pruned_once_they_owe_nothing
);
on_backends!([raft] the_raft_mode_refuses_webhooks_with_a_stable_code);

/// What the receiver does with the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Answer 500 this many more times, then 200.
    Fail(u32),
    /// Never answer.
    Hang,
    Ok,
}

#[derive(Debug)]
struct Receiver {
    mode: Mode,
    /// Every request that arrived, verified or not.
    requests: usize,
    /// Event id → (body, signature header) of each delivery answered 200.
    delivered: BTreeMap<String, Vec<(Bytes, String)>>,
}

type Shared = Arc<Mutex<Receiver>>;

async fn receive(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let mode = {
        let mut r = shared.lock().unwrap();
        r.requests += 1;
        let mode = r.mode;
        if let Mode::Fail(n) = mode {
            r.mode = if n <= 1 { Mode::Ok } else { Mode::Fail(n - 1) };
        }
        mode
    };
    match mode {
        Mode::Hang => std::future::pending().await,
        Mode::Fail(_) => StatusCode::INTERNAL_SERVER_ERROR,
        Mode::Ok => {
            let signature = headers
                .get("once-signature")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let id: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let id = id["id"].as_str().unwrap_or_default().to_owned();
            let mut r = shared.lock().unwrap();
            r.delivered.entry(id).or_default().push((body, signature));
            StatusCode::OK
        }
    }
}

struct TestReceiver {
    url: String,
    shared: Shared,
}

impl TestReceiver {
    async fn start(mode: Mode) -> Self {
        let shared: Shared = Arc::new(Mutex::new(Receiver {
            mode,
            requests: 0,
            delivered: BTreeMap::new(),
        }));
        let app = axum::Router::new()
            .route("/hook", post_route(receive))
            .with_state(shared.clone());
        let addr = once_test_support::serve::serve(app).await;
        Self {
            url: format!("http://{addr}/hook"),
            shared,
        }
    }

    fn set(&self, mode: Mode) {
        self.shared.lock().unwrap().mode = mode;
    }

    fn requests(&self) -> usize {
        self.shared.lock().unwrap().requests
    }

    /// The distinct event ids delivered, each checked against `secrets`.
    fn verified_ids(&self, secrets: &[&str]) -> BTreeSet<String> {
        let r = self.shared.lock().unwrap();
        let mut ids = BTreeSet::new();
        for (id, deliveries) in &r.delivered {
            for (body, signature) in deliveries {
                let verified = verify(
                    secrets,
                    signature,
                    body,
                    Tolerance::default(),
                    SystemTime::now(),
                )
                .unwrap_or_else(|e| panic!("delivery of {id} does not verify: {e}"));
                assert_eq!(&verified.event_id, id);
            }
            ids.insert(id.clone());
        }
        ids
    }

    fn bodies(&self) -> BTreeMap<String, Value> {
        let r = self.shared.lock().unwrap();
        r.delivered
            .iter()
            .map(|(id, d)| (id.clone(), serde_json::from_slice(&d[0].0).unwrap()))
            .collect()
    }
}

/// The receivers run on 127.0.0.1, which a production node refuses to
/// deliver to (`node/src/webhooks/targets.rs`).
const LOCAL_RECEIVERS: &str = "--webhook-allow-private-targets";

/// Node flags with a short delivery schedule, so retries happen within a
/// test, delivering to the test's local receivers.
const SHORT_SCHEDULE: &[&str] = &[
    LOCAL_RECEIVERS,
    "--webhook-retry-base",
    "50ms",
    "--webhook-retry-cap",
    "200ms",
    "--webhook-timeout",
    "1s",
];

async fn create_endpoint(
    node: &NodeProcess,
    key: &str,
    url: &str,
    events: Value,
) -> (String, String) {
    let answer = once_test_support::client::send(
        reqwest::Client::new()
            .post(format!("{}/webhook-endpoints", node.url))
            .bearer_auth(key)
            .json(&serde_json::json!({"url": url, "events": events})),
    )
    .await;
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let body = answer.json();
    assert_eq!(body["object"], "webhook_endpoint");
    let secret = body["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    (body["id"].as_str().unwrap().to_owned(), secret)
}

async fn pay(node: &NodeProcess, n: usize, prefix: &str) -> Vec<String> {
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for i in 0..n {
        let body = payment_body("acc_1", "10.00", &format!("{prefix}-{i}"));
        let answer = once_test_support::client::send(post(
            &client,
            &node.url,
            ACME_KEY,
            Some(&format!("{prefix}-{i}")),
            &body,
        ))
        .await;
        assert_eq!(
            answer.status,
            201,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        ids.push(answer.json()["id"].as_str().unwrap().to_owned());
    }
    ids
}

/// Every event of the tenant in `GET /events`, all pages.
async fn listed_events(node: &NodeProcess) -> Vec<Value> {
    let client = reqwest::Client::new();
    let mut events = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{}/events?limit=2", node.url);
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let page = once_test_support::client::send(client.get(url).bearer_auth(ACME_KEY)).await;
        assert_eq!(page.status, 200, "{}", String::from_utf8_lossy(&page.body));
        let page = page.json();
        events.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return events,
        }
    }
}

async fn a_receiver_that_fails_first_gets_every_event_once_it_recovers(backend: Backend) {
    let db = TestDb::new(backend).await;
    let node = NodeProcess::start(&db, SHORT_SCHEDULE, &[]).await;
    let receiver = TestReceiver::start(Mode::Fail(4)).await;
    let (_, secret) =
        create_endpoint(&node, ACME_KEY, &receiver.url, serde_json::json!(["*"])).await;
    pay(&node, 5, "fails-first").await;

    until("five events delivered", Duration::from_secs(30), || async {
        receiver.verified_ids(&[&secret]).len() == 5
    })
    .await;
    assert!(
        receiver.requests() >= 9,
        "the four failures were attempts too"
    );
    // The order guarantee (decision 0091) is none across events: each
    // carries `createdAt`, and `GET /events` lists them in that order with
    // the very bodies that were signed.
    let listed = listed_events(&node).await;
    assert_eq!(listed.len(), 5);
    let bodies = receiver.bodies();
    for event in &listed {
        assert_eq!(&bodies[event["id"].as_str().unwrap()], event);
        assert_eq!(event["type"], "payment.succeeded");
    }
    let created: Vec<&str> = listed
        .iter()
        .map(|e| e["createdAt"].as_str().unwrap())
        .collect();
    let mut sorted = created.clone();
    sorted.sort();
    assert_eq!(created, sorted, "GET /events is in creation order");
    node.terminate().await;
}

async fn a_node_killed_mid_delivery_loses_no_event(backend: Backend) {
    let db = TestDb::new(backend).await;
    let node = NodeProcess::start(&db, SHORT_SCHEDULE, &[]).await;
    let receiver = TestReceiver::start(Mode::Hang).await;
    let (_, secret) = create_endpoint(
        &node,
        ACME_KEY,
        &receiver.url,
        serde_json::json!(["payment.succeeded"]),
    )
    .await;
    pay(&node, 6, "killed").await;
    until("a delivery in flight", Duration::from_secs(30), || async {
        receiver.requests() > 0
    })
    .await;
    node.kill().await;

    receiver.set(Mode::Ok);
    let node = NodeProcess::start(&db, SHORT_SCHEDULE, &[]).await;
    until(
        "every event delivered after the restart",
        Duration::from_secs(60),
        || async { receiver.verified_ids(&[&secret]).len() == 6 },
    )
    .await;
    node.terminate().await;
}

async fn a_hanging_endpoint_does_not_hold_up_payments_or_other_endpoints(backend: Backend) {
    let db = TestDb::new(backend).await;
    // A long timeout: the hanging endpoint's attempts stay in flight for
    // the whole test.
    let node = NodeProcess::start(&db, &[LOCAL_RECEIVERS, "--webhook-timeout", "120s"], &[]).await;
    let hanging = TestReceiver::start(Mode::Hang).await;
    let healthy = TestReceiver::start(Mode::Ok).await;
    let (hanging_id, _) =
        create_endpoint(&node, ACME_KEY, &hanging.url, serde_json::json!(["*"])).await;
    let (_, secret) =
        create_endpoint(&node, ACME_KEY, &healthy.url, serde_json::json!(["*"])).await;
    // More events than one endpoint may hold in flight (8 by default), so
    // the hanging endpoint's backlog exceeds its share.
    pay(&node, 20, "hang").await;
    until(
        "the healthy endpoint got every event",
        Duration::from_secs(60),
        || async { healthy.verified_ids(&[&secret]).len() == 20 },
    )
    .await;
    let pending = db
        .count(&format!(
            "SELECT COUNT(*) FROM webhook_deliveries WHERE endpoint_id = '{hanging_id}' AND status = 'PENDING'"
        ))
        .await;
    assert_eq!(
        pending, 20,
        "the hanging endpoint's deliveries are all still pending"
    );
    assert!(
        hanging.requests() <= 8,
        "at most its share in flight: {}",
        hanging.requests()
    );
    // Payments still go through while they hang.
    pay(&node, 5, "hang-more").await;
    node.kill().await;
}

async fn a_delivery_out_of_retries_is_dead_lettered_and_redriven(backend: Backend) {
    let db = TestDb::new(backend).await;
    let args = [SHORT_SCHEDULE, &["--webhook-retry-budget", "1s"]].concat();
    let node = NodeProcess::start(&db, &args, &[]).await;
    let receiver = TestReceiver::start(Mode::Fail(u32::MAX)).await;
    let (_, secret) =
        create_endpoint(&node, ACME_KEY, &receiver.url, serde_json::json!(["*"])).await;
    pay(&node, 1, "dead").await;
    until("a dead letter", Duration::from_secs(30), || async {
        db.count("SELECT COUNT(*) FROM dead_letters WHERE consumer_name = 'webhook_delivery' AND status = 'DEAD'")
            .await
            == 1
    })
    .await;
    let attempts = receiver.requests();
    assert!(attempts >= 3, "retried before giving up: {attempts}");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'DEAD'")
            .await,
        1
    );
    receiver.set(Mode::Ok);
    let letters = std::process::Command::new(ONCE)
        .args([
            "events",
            "dead-letters",
            "--consumer",
            "webhook_delivery",
            "--json",
            "--database-url",
            &db.url,
        ])
        .output()
        .unwrap();
    assert!(letters.status.success());
    let letter: Value =
        serde_json::from_slice(letters.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    let id = letter["id"].as_i64().unwrap().to_string();
    let redrive = std::process::Command::new(ONCE)
        .args(["events", "redrive", &id, "--database-url", &db.url])
        .output()
        .unwrap();
    assert!(
        redrive.status.success(),
        "{}",
        String::from_utf8_lossy(&redrive.stderr)
    );
    until(
        "the redriven delivery arrives",
        Duration::from_secs(30),
        || async { receiver.verified_ids(&[&secret]).len() == 1 },
    )
    .await;
    until("the letter is redriven", Duration::from_secs(10), || async {
        db.count("SELECT COUNT(*) FROM dead_letters WHERE consumer_name = 'webhook_delivery' AND status = 'REDRIVEN'")
            .await
            == 1
    })
    .await;
    node.terminate().await;
}

async fn during_a_rotation_both_secrets_verify(backend: Backend) {
    let db = TestDb::new(backend).await;
    let node = NodeProcess::start(&db, SHORT_SCHEDULE, &[]).await;
    let receiver = TestReceiver::start(Mode::Ok).await;
    let (id, old) = create_endpoint(&node, ACME_KEY, &receiver.url, serde_json::json!(["*"])).await;
    let rotated = once_test_support::client::send(
        reqwest::Client::new()
            .post(format!("{}/webhook-endpoints/{id}/rotate-secret", node.url))
            .bearer_auth(ACME_KEY),
    )
    .await;
    assert_eq!(
        rotated.status,
        200,
        "{}",
        String::from_utf8_lossy(&rotated.body)
    );
    let rotated = rotated.json();
    let new = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert!(rotated["previousSecretExpiresAt"].is_string());
    pay(&node, 2, "rotation").await;
    until("two events delivered", Duration::from_secs(30), || async {
        receiver.shared.lock().unwrap().delivered.len() == 2
    })
    .await;
    // Each secret alone verifies every delivery; a third does not.
    assert_eq!(receiver.verified_ids(&[&old]).len(), 2);
    assert_eq!(receiver.verified_ids(&[&new]).len(), 2);
    {
        let r = receiver.shared.lock().unwrap();
        let (body, signature) = &r.delivered.values().next().unwrap()[0];
        assert!(
            verify(
                &["whsec_other"],
                signature,
                body,
                Tolerance::default(),
                SystemTime::now()
            )
            .is_err()
        );
    }
    node.terminate().await;
}

async fn endpoints_are_listed_deleted_and_checked_per_tenant(backend: Backend) {
    let db = TestDb::new(backend).await;
    let node = NodeProcess::start(&db, &[], &[]).await;
    let client = reqwest::Client::new();
    let (id, _) = create_endpoint(
        &node,
        ACME_KEY,
        "https://merchant.example/hook",
        serde_json::json!(["payment.succeeded"]),
    )
    .await;
    let listed = once_test_support::client::send(
        client
            .get(format!("{}/webhook-endpoints", node.url))
            .bearer_auth(ACME_KEY),
    )
    .await
    .json();
    assert_eq!(listed["data"].as_array().unwrap().len(), 1);
    assert!(
        listed["data"][0].get("secret").is_none(),
        "a secret is shown once"
    );
    let other = once_test_support::client::send(
        client
            .get(format!("{}/webhook-endpoints", node.url))
            .bearer_auth(GLOBEX_KEY),
    )
    .await
    .json();
    assert_eq!(
        other["data"].as_array().unwrap().len(),
        0,
        "another tenant sees none"
    );
    let foreign = once_test_support::client::send(
        client
            .delete(format!("{}/webhook-endpoints/{id}", node.url))
            .bearer_auth(GLOBEX_KEY),
    )
    .await;
    assert_eq!(
        (foreign.status, foreign.error_code()),
        (404, "NOT_FOUND".to_owned())
    );
    let bad = once_test_support::client::send(
        client
            .post(format!("{}/webhook-endpoints", node.url))
            .bearer_auth(ACME_KEY)
            .json(&serde_json::json!({"url": "ftp://x", "events": ["*"]})),
    )
    .await;
    assert_eq!(
        (bad.status, bad.error_code()),
        (422, "VALIDATION_FAILED".to_owned())
    );
    let deleted = once_test_support::client::send(
        client
            .delete(format!("{}/webhook-endpoints/{id}", node.url))
            .bearer_auth(ACME_KEY),
    )
    .await;
    assert_eq!(deleted.status, 204);
    let again = once_test_support::client::send(
        client
            .delete(format!("{}/webhook-endpoints/{id}", node.url))
            .bearer_auth(ACME_KEY),
    )
    .await;
    assert_eq!(again.status, 404);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM webhook_endpoints WHERE deleted_at IS NULL")
            .await,
        0
    );
    node.terminate().await;
}

async fn the_raft_mode_refuses_webhooks_with_a_stable_code(backend: Backend) {
    let db = TestDb::new(backend).await;
    let node = NodeProcess::start(&db, &[], &[]).await;
    let client = reqwest::Client::new();
    for request in [
        client.get(format!("{}/webhook-endpoints", node.url)),
        client.get(format!("{}/events", node.url)),
        client
            .post(format!("{}/webhook-endpoints", node.url))
            .json(&serde_json::json!({"url": "https://m.example/h", "events": ["*"]})),
    ] {
        let answer = once_test_support::client::send(request.bearer_auth(ACME_KEY)).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (501, "NOT_IMPLEMENTED".to_owned())
        );
    }
    node.terminate().await;
}

/// Server-side request forgery (decision 0102): without
/// `--webhook-allow-private-targets` a tenant can neither register an
/// address of the node's own network nor reach one through a DNS name; the
/// receiver on 127.0.0.1 never sees a request, and the delivery records why.
async fn a_url_into_the_nodes_own_network_is_refused_and_a_name_resolving_there_reaches_nothing(
    backend: Backend,
) {
    let db = TestDb::new(backend).await;
    let production_schedule: Vec<&str> = SHORT_SCHEDULE
        .iter()
        .copied()
        .filter(|flag| *flag != LOCAL_RECEIVERS)
        .collect();
    let node = NodeProcess::start(&db, &production_schedule, &[]).await;
    let receiver = TestReceiver::start(Mode::Ok).await;
    let client = reqwest::Client::new();
    let port = receiver
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    for inward in [
        receiver.url.clone(),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://10.0.0.7/hook".to_owned(),
    ] {
        let answer = once_test_support::client::send(
            client
                .post(format!("{}/webhook-endpoints", node.url))
                .bearer_auth(ACME_KEY)
                .json(&serde_json::json!({"url": inward, "events": ["*"]})),
        )
        .await;
        assert_eq!(
            answer.status,
            422,
            "{inward}: {}",
            String::from_utf8_lossy(&answer.body)
        );
        let body = answer.json();
        assert_eq!(body["errorCode"], "VALIDATION_FAILED", "{inward}");
        assert!(
            body["message"].as_str().unwrap().contains("public"),
            "{inward}: {body}"
        );
    }
    assert_eq!(
        db.count("SELECT COUNT(*) FROM webhook_endpoints").await,
        0,
        "nothing stored"
    );

    // A name is judged where it resolves, at each attempt (a rebinding
    // name passes registration the same way): this machine's host name,
    // which /etc/hosts maps to a loopback or private address.
    let host = hostname_resolving_inward().await;
    let url = format!("http://{host}:{port}/hook");
    create_endpoint(&node, ACME_KEY, &url, serde_json::json!(["*"])).await;
    pay(&node, 1, "inward").await;
    until("an attempt refused by the guard", Duration::from_secs(30), || async {
        db.count("SELECT COUNT(*) FROM webhook_deliveries WHERE attempts >= 2 AND last_error LIKE '%no public address%'")
            .await
            == 1
    })
    .await;
    assert_eq!(receiver.requests(), 0, "the guard let a request through");
    // Payments are untouched by a refused target.
    pay(&node, 2, "inward-more").await;
    node.terminate().await;
}

/// This machine's host name, checked to resolve only to addresses the
/// guard refuses (Debian maps it to 127.0.1.1; containers to their own
/// private address), so the test above cannot pass by resolving elsewhere.
async fn hostname_resolving_inward() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("the host name")
        .trim()
        .to_owned();
    let addrs: Vec<_> = tokio::net::lookup_host((host.as_str(), 0))
        .await
        .unwrap_or_else(|e| {
            panic!("{host:?} does not resolve ({e}): the SSRF test needs a host name in /etc/hosts")
        })
        .collect();
    assert!(
        !addrs.is_empty()
            && addrs
                .iter()
                .all(|a| !once_node::webhooks::targets::is_public(a.ip())),
        "{host:?} resolves to {addrs:?}: the SSRF test needs it to resolve inward"
    );
    host
}

/// Retention (`node/src/webhooks/retention.rs`): an event older than 30
/// days whose deliveries all ended is deleted with them; one still owed
/// (a delivery pending, or dead and redrivable) is kept whatever its age,
/// and younger ones are kept.
async fn events_past_their_30_days_are_pruned_once_they_owe_nothing(backend: Backend) {
    let db = TestDb::new(backend).await;
    let node = NodeProcess::start(&db, SHORT_SCHEDULE, &[]).await;
    let receiver = TestReceiver::start(Mode::Ok).await;
    let (endpoint, secret) =
        create_endpoint(&node, ACME_KEY, &receiver.url, serde_json::json!(["*"])).await;
    pay(&node, 1, "fresh").await;
    until(
        "the fresh event delivered",
        Duration::from_secs(30),
        || async { receiver.verified_ids(&[&secret]).len() == 1 },
    )
    .await;
    node.terminate().await;

    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let day = 86_400_000_i64;
    let pool = db.pool().await;
    // (event, age in days, its delivery's status)
    let planted = [
        ("evt_old_delivered", 31, "DELIVERED"),
        ("evt_old_cancelled", 40, "CANCELLED"),
        ("evt_old_dead", 35, "DEAD"),
        ("evt_old_pending", 33, "PENDING"),
        ("evt_young_delivered", 29, "DELIVERED"),
    ];
    for (event, age, status) in planted {
        let created = now - age * day;
        sqlx::query(
            "INSERT INTO webhook_events (event_id, tenant_id, event_type, aggregate_id, data, created_at, fanned_out_at) \
             VALUES ($1, 'acme', 'payment.succeeded', 'pay_planted', '{}', $2, $2)",
        )
        .bind(event)
        .bind(created)
        .execute(&pool.pool)
        .await
        .unwrap();
        // A pending one is due tomorrow, so no attempt touches it here.
        sqlx::query(
            "INSERT INTO webhook_deliveries (event_id, endpoint_id, tenant_id, status, attempts, next_attempt_at, retry_since, created_at) \
             VALUES ($1, $2, 'acme', $3, 1, $4, $5, $5)",
        )
        .bind(event)
        .bind(&endpoint)
        .bind(status)
        .bind(now + day)
        .bind(created)
        .execute(&pool.pool)
        .await
        .unwrap();
    }
    pool.pool.close().await;

    // The dispatcher prunes as it starts.
    let node = NodeProcess::start(&db, SHORT_SCHEDULE, &[]).await;
    until("the old events that owe nothing pruned", Duration::from_secs(30), || async {
        db.count("SELECT COUNT(*) FROM webhook_events WHERE event_id IN ('evt_old_delivered', 'evt_old_cancelled')")
            .await
            == 0
    })
    .await;
    assert_eq!(
        db.count("SELECT COUNT(*) FROM webhook_deliveries WHERE event_id IN ('evt_old_delivered', 'evt_old_cancelled')")
            .await,
        0,
        "their deliveries went with them"
    );
    for kept in ["evt_old_dead", "evt_old_pending", "evt_young_delivered"] {
        let sql = format!("SELECT COUNT(*) FROM webhook_events WHERE event_id = '{kept}'");
        assert_eq!(db.count(&sql).await, 1, "{kept} is kept");
        let sql = format!("SELECT COUNT(*) FROM webhook_deliveries WHERE event_id = '{kept}'");
        assert_eq!(db.count(&sql).await, 1, "{kept}'s delivery is kept");
    }
    assert_eq!(
        db.count("SELECT COUNT(*) FROM webhook_events WHERE event_id NOT IN ('evt_old_dead', 'evt_old_pending', 'evt_young_delivered')")
            .await,
        1,
        "the fresh payment's event is kept"
    );
    node.terminate().await;
}
