//! The provider over HTTP, with the simulator's faults: a provider that is
//! slow, fails, or charges without answering never causes a second charge
//! (I5), and a stale owner never completes (I6). Every check of "one charge"
//! reads the simulator's ledger.

use std::time::Duration;

use futures::FutureExt;

use crate::helpers::*;
use crate::on_every_backend;
use once_test_support::wait::until;

on_every_backend!(
    a_timeout_after_the_charge_is_answered_by_the_retry_under_the_same_key,
    a_reset_after_the_charge_never_charges_twice,
    an_error_before_the_charge_is_retryable_and_charges_once,
    a_charge_whose_answer_never_comes_becomes_unknown_then_recovered_by_key,
    a_provider_unreachable_past_the_lease_is_recovered_by_the_worker_when_it_returns,
    a_stale_owner_that_wakes_after_a_takeover_cannot_complete,
    a_declined_charge_replays_its_402,
    operators_resolve_unknown_outcomes_with_an_audit_trail,
);

/// Node flags whose provider budget (3 attempts) fits inside the lease.
fn provider_args(sim_url: &str) -> Vec<&str> {
    provider_args_with(sim_url, "200ms")
}

fn provider_args_with<'a>(sim_url: &'a str, recovery_interval: &'a str) -> Vec<&'a str> {
    vec![
        "--lease",
        "2s",
        "--provider-url",
        sim_url,
        "--provider-connect-timeout",
        "200ms",
        "--provider-timeout",
        "300ms",
        "--recovery-interval",
        recovery_interval,
    ]
}

async fn a_timeout_after_the_charge_is_answered_by_the_retry_under_the_same_key(backend: Backend) {
    let db = TestDb::new(backend).await;
    let sim = ProviderSim::start().await;
    let node = NodeProcess::start(&db, &provider_args(&sim.url), &[]).await;
    sim.arm("timeout_after_charge", 1, 0).await;
    let client = reqwest::Client::new();
    let answer = send(post(
        &client,
        &node.url,
        ACME_KEY,
        Some("k-timeout"),
        &payment_body("acc_1", "9.00", "t1"),
    ))
    .await;
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let ledger = sim.ledger().await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    // At least: a retry that itself outlives the 300 ms timeout asks once more.
    assert!(
        ledger[0].requests >= 2,
        "the node asked again under the same key: {ledger:?}"
    );
    assert_eq!(ledger[0].idempotency_key, provider_key_of(&answer));
    let metrics = scrape(&reqwest::Client::new(), &sim.url).await;
    assert!(
        metrics.contains("provider_charges{status=\"succeeded\"} 1"),
        "{metrics}"
    );
    let repeated = format!("provider_repeated_requests {}\n", ledger[0].requests - 1);
    assert!(metrics.contains(&repeated), "{repeated:?} in {metrics}");
}

async fn a_reset_after_the_charge_never_charges_twice(backend: Backend) {
    let db = TestDb::new(backend).await;
    let sim = ProviderSim::start().await;
    let node = NodeProcess::start(&db, &provider_args(&sim.url), &[]).await;
    sim.arm("reset_after_charge", 1, 0).await;
    let client = reqwest::Client::new();
    let answer = send(post(
        &client,
        &node.url,
        ACME_KEY,
        Some("k-reset"),
        &payment_body("acc_1", "9.00", "r1"),
    ))
    .await;
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let ledger = sim.ledger().await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    // The raft mode settles the row after the answer (decision 0054).
    until("the row is settled", Duration::from_secs(10), || async {
        db.count("SELECT COUNT(*) FROM payments WHERE status = 'succeeded'")
            .await
            == 1
    })
    .await;
    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 1);
}

async fn an_error_before_the_charge_is_retryable_and_charges_once(backend: Backend) {
    let db = TestDb::new(backend).await;
    let sim = ProviderSim::start().await;
    let node = NodeProcess::start(&db, &provider_args(&sim.url), &[]).await;
    // Every attempt of the first request meets a 503.
    sim.arm("error_before_charge", 3, 0).await;
    let client = reqwest::Client::new();
    let body = payment_body("acc_1", "9.00", "e1");
    let failed = send(post(&client, &node.url, ACME_KEY, Some("k-503"), &body)).await;
    assert_eq!(
        (failed.status, failed.error_code().as_str()),
        (503, "SERVICE_UNAVAILABLE")
    );
    assert!(sim.ledger().await.is_empty(), "nothing was charged");
    assert_eq!(db.count_records("FAILED_RETRYABLE").await, 1);

    let retried = send(post(&client, &node.url, ACME_KEY, Some("k-503"), &body)).await;
    assert_eq!((retried.status, retried.replayed), (201, false));
    let again = send(post(&client, &node.url, ACME_KEY, Some("k-503"), &body)).await;
    assert_eq!((again.status, again.replayed), (201, true));
    assert_eq!(sim.ledger().await.len(), 1, "charged exactly once");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments").await,
        1,
        "the retry reused the payment"
    );
}

async fn a_charge_whose_answer_never_comes_becomes_unknown_then_recovered_by_key(backend: Backend) {
    let db = TestDb::new(backend).await;
    let sim = ProviderSim::start().await;
    let node = NodeProcess::start(&db, &provider_args(&sim.url), &[]).await;
    // Every attempt waits 1.5 s at the provider, far past the 300 ms timeout,
    // and the provider charges all the same.
    sim.arm("latency", 3, 1500).await;
    let client = reqwest::Client::new();
    let body = payment_body("acc_1", "9.00", "u1");
    let pending = send(post(&client, &node.url, ACME_KEY, Some("k-unknown"), &body)).await;
    assert_eq!(
        pending.status,
        202,
        "{}",
        String::from_utf8_lossy(&pending.body)
    );
    assert_eq!(pending.json()["status"], "processing");
    assert!(pending.retry_after.is_some());
    // This request's outcome, and only it, is unknown so far; the recovery
    // that follows finds the charge (or makes it, no fault left): known.
    assert_eq!(
        metric(
            &client,
            &node.admin_url,
            "idempotency_unknown_state_count_total"
        )
        .await,
        1.0
    );

    let answer = eventually(Duration::from_secs(20), || {
        let request = post(&client, &node.url, ACME_KEY, Some("k-unknown"), &body);
        async move {
            let answer = send(request).await;
            (answer.status == 201).then_some(answer)
        }
    })
    .await;
    let ledger = eventually(Duration::from_secs(10), || async {
        let ledger = sim.ledger().await;
        // Wait for the provider's slow handlers to have all arrived (3, or
        // 4 when the recovery's own charge came before the first of them).
        (ledger.first().is_some_and(|c| c.requests >= 3)).then_some(ledger)
    })
    .await;
    assert_eq!(
        ledger.len(),
        1,
        "one charge, however many times it was asked: {ledger:?}"
    );
    assert_eq!(ledger[0].idempotency_key, provider_key_of(&answer));
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments WHERE status = 'succeeded'")
            .await,
        1
    );
}

/// Sends a payment while the simulator stalls, kills the simulator with the
/// charge in flight (received, not yet answered), and returns the node's
/// answer. The record is then UNKNOWN_REQUIRES_RECOVERY: the request left,
/// and nobody knows what came of it.
async fn leave_unknown(node: &NodeProcess, sim: &mut ProviderSim, key: &str, body: &str) -> Answer {
    sim.arm("latency", 1, 30_000).await;
    let client = reqwest::Client::new();
    let in_flight = tokio::spawn(send(post(&client, &node.url, ACME_KEY, Some(key), body)));
    // The charge has reached the provider once its fault is consumed.
    eventually(Duration::from_secs(10), || async {
        (sim.armed_faults().await == 0).then_some(())
    })
    .await;
    sim.kill().await;
    let answer = in_flight.await.unwrap();
    assert_eq!(
        answer.status,
        202,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    answer
}

async fn a_provider_unreachable_past_the_lease_is_recovered_by_the_worker_when_it_returns(
    backend: Backend,
) {
    let db = TestDb::new(backend).await;
    let mut sim = ProviderSim::start().await;
    let node = NodeProcess::start(&db, &provider_args(&sim.url), &[]).await;
    let body = payment_body("acc_1", "9.00", "down-1");
    leave_unknown(&node, &mut sim, "k-down", &body).await;
    assert_eq!(db.count_records("UNKNOWN_REQUIRES_RECOVERY").await, 1);

    // The provider stays away longer than the lease; the worker keeps
    // trying (and backing off) without ever guessing.
    let client = reqwest::Client::new();
    // At least two: the worker keeps retrying (with backoff) for as long as
    // the provider is away, so the count grows with the wait.
    eventually(Duration::from_secs(10), || async {
        (metric(&client, &node.admin_url, "idempotency_takeover_count_total").await >= 2.0)
            .then_some(())
    })
    .await;
    assert_eq!(db.count_records("COMPLETED").await, 0);

    // The provider comes back (its old, stalled request never charged).
    let sim = ProviderSim::start_on(&sim.addr()).await;
    eventually(Duration::from_secs(30), || async {
        (db.count_records("COMPLETED").await == 1).then_some(())
    })
    .await;
    let answer = send(post(&client, &node.url, ACME_KEY, Some("k-down"), &body)).await;
    assert_eq!(
        (answer.status, answer.replayed),
        (201, true),
        "the client's retry gets the 201 the worker stored"
    );
    assert_eq!(sim.ledger().await.len(), 1);
}

async fn a_stale_owner_that_wakes_after_a_takeover_cannot_complete(backend: Backend) {
    let db = TestDb::new(backend).await;
    let sim = ProviderSim::start().await;
    let quiet = provider_args_with(&sim.url, "1h");
    // Owner A charges, then stalls for 4 s — twice its lease.
    let a = NodeProcess::start(
        &db,
        &quiet,
        &[("FAILPOINTS", "after_provider_charge=sleep(4000)")],
    )
    .await;
    let b = NodeProcess::start(&db, &quiet, &[]).await;
    let client = reqwest::Client::new();
    let body = payment_body("acc_1", "9.00", "z1");
    let from_a = tokio::spawn(send(post(
        &client,
        &a.url,
        ACME_KEY,
        Some("k-stale-owner"),
        &body,
    )));
    eventually(Duration::from_secs(10), || async {
        (sim.ledger().await.len() == 1).then_some(())
    })
    .await;

    // A retry at B, after A's lease: B takes over, asks the provider by key,
    // and completes.
    let from_b = eventually(Duration::from_secs(20), || {
        let request = post(&client, &b.url, ACME_KEY, Some("k-stale-owner"), &body);
        async move {
            let answer = send(request).await;
            (answer.status == 201).then_some(answer)
        }
    })
    .await;
    // A wakes up: its completion is refused, and it answers with B's result.
    let from_a = from_a.await.unwrap();
    assert_eq!(
        from_a.status,
        201,
        "{}",
        String::from_utf8_lossy(&from_a.body)
    );
    assert_eq!(from_a.body, from_b.body, "A replays what B stored");
    assert_eq!(sim.ledger().await.len(), 1);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox").await,
        1,
        "one event: A wrote nothing"
    );
    assert_eq!(
        db.records().await.iter().filter(|r| r.fence == 2).count(),
        1,
        "one takeover"
    );
}

async fn a_declined_charge_replays_its_402(backend: Backend) {
    let db = TestDb::new(backend).await;
    let sim = ProviderSim::start().await;
    let node = NodeProcess::start(&db, &provider_args(&sim.url), &[]).await;
    let client = reqwest::Client::new();
    let body = payment_body("acc_nofunds_9", "9.00", "d1");
    let first = send(post(&client, &node.url, ACME_KEY, Some("k-decl"), &body)).await;
    assert_eq!(
        (first.status, first.error_code().as_str()),
        (402, "INSUFFICIENT_FUNDS")
    );
    let again = send(post(&client, &node.url, ACME_KEY, Some("k-decl"), &body)).await;
    assert_eq!(
        (again.status, again.replayed, again.body.clone()),
        (402, true, first.body.clone())
    );
    // A decline armed as a fault on an account with funds behaves the same.
    sim.arm("decline", 1, 0).await;
    let armed = send(post(
        &client,
        &node.url,
        ACME_KEY,
        Some("k-decl-2"),
        &payment_body("acc_2", "9.00", "d2"),
    ))
    .await;
    assert_eq!(armed.status, 402);
    let ledger = sim.ledger().await;
    assert_eq!(ledger.len(), 2);
    assert!(ledger.iter().all(|c| c.status == "declined"));
}

async fn operators_resolve_unknown_outcomes_with_an_audit_trail(backend: Backend) {
    let db = TestDb::new(backend).await;
    let mut sim = ProviderSim::start().await;
    let token = "adm_test_token_0123456789";
    // The worker stays out of the way: this is the operator's call.
    let args = provider_args_with(&sim.url, "1h");
    let node = NodeProcess::start(&db, &args, &[("ONCE_ADMIN_TOKEN", token)]).await;
    let charged_body = payment_body("acc_1", "9.00", "op-1");
    let not_charged_body = payment_body("acc_1", "9.00", "op-2");
    leave_unknown(&node, &mut sim, "k-op-charged", &charged_body).await;
    let sim = ProviderSim::start_on(&sim.addr()).await;
    let mut sim = sim;
    leave_unknown(&node, &mut sim, "k-op-not-charged", &not_charged_body).await;

    let records = |args: &[&str]| {
        let mut command = tokio::process::Command::new(ONCE);
        command
            .arg("records")
            .args(args)
            .args(["--node", &node.admin_url])
            .env("ONCE_ADMIN_TOKEN", token);
        command.output().map(|o| o.unwrap())
    };
    let listed = records(&["list", "--status", "unknown"]).await;
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.len(), 2);

    let resolved = records(&[
        "resolve",
        "--tenant",
        "acme",
        "--key",
        "k-op-charged",
        "--outcome",
        "charged",
        "--reason",
        "seen in the provider dashboard",
        "--actor",
        "alice",
    ])
    .await;
    assert!(
        resolved.status.success(),
        "{}",
        String::from_utf8_lossy(&resolved.stderr)
    );
    let resolved = records(&[
        "resolve",
        "--tenant",
        "acme",
        "--key",
        "k-op-not-charged",
        "--outcome",
        "not-charged",
        "--reason",
        "provider confirmed no charge",
        "--actor",
        "bob",
    ])
    .await;
    assert!(
        resolved.status.success(),
        "{}",
        String::from_utf8_lossy(&resolved.stderr)
    );
    let wrong_token = tokio::process::Command::new(ONCE)
        .args(["records", "list", "--node", &node.admin_url])
        .env("ONCE_ADMIN_TOKEN", "not-the-admin-token-000")
        .output()
        .await
        .unwrap();
    assert!(!wrong_token.status.success());

    assert_eq!(db.count("SELECT COUNT(*) FROM record_resolutions WHERE actor = 'alice' AND outcome = 'charged' AND reason <> ''").await, 1);
    assert_eq!(db.count("SELECT COUNT(*) FROM record_resolutions WHERE actor = 'bob' AND outcome = 'not-charged'").await, 1);
    // The audit trail as the console reads it: newest first, with the token only.
    let http = reqwest::Client::new();
    let trail_url = format!("{}/admin/resolutions?limit=10", node.admin_url);
    let refused = http.get(&trail_url).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let trail: Vec<serde_json::Value> = http
        .get(&trail_url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let seen: Vec<(&str, &str, &str)> = trail
        .iter()
        .map(|e| {
            (
                e["actor"].as_str().unwrap(),
                e["outcome"].as_str().unwrap(),
                e["key"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("bob", "not-charged", "k-op-not-charged"),
            ("alice", "charged", "k-op-charged")
        ]
    );
    assert_eq!(trail[1]["reason"], "seen in the provider dashboard");
    assert!(trail[1]["paymentId"].as_str().unwrap().starts_with("pay_"));

    // The provider is back; the clients retry.
    let sim = ProviderSim::start_on(&sim.addr()).await;
    let client = reqwest::Client::new();
    let charged = send(post(
        &client,
        &node.url,
        ACME_KEY,
        Some("k-op-charged"),
        &charged_body,
    ))
    .await;
    assert_eq!(
        (charged.status, charged.replayed),
        (201, true),
        "the operator's verdict is replayed"
    );
    assert!(
        sim.ledger().await.is_empty(),
        "resolving as charged charges nothing"
    );
    let retried = send(post(
        &client,
        &node.url,
        ACME_KEY,
        Some("k-op-not-charged"),
        &not_charged_body,
    ))
    .await;
    assert_eq!(
        (retried.status, retried.replayed),
        (201, false),
        "not-charged: the retry charges, under the same key"
    );
    assert_eq!(sim.ledger().await.len(), 1);
}
