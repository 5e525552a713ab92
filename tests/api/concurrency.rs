//! Races: concurrent duplicates, keyless duplicates, takeovers and fencing.

use std::collections::HashSet;
use std::time::Duration;

use futures::future::join_all;
use once_node::idempotency::Step;
use once_node::provider::PaymentProvider;
use once_node::store::{Reclaim, StoreError};

use crate::contract::claim_as_another_owner;
use crate::helpers::*;
use crate::{on_every_backend, on_sql_backends};

on_every_backend!(
    fifty_concurrent_identical_requests_over_two_processes_execute_once,
    twenty_keyless_duplicates_create_one_payment,
    a_stale_in_progress_record_is_taken_over_exactly_once,
    two_racing_takeovers_have_one_winner,
    a_stale_owner_cannot_complete_after_a_takeover,
);

// Its premise is the PostgreSQL single-statement claim (a crash between the
// claim and dropping the payment id); the raft mode reserves business keys
// in raft-store, not through the regional row.
on_sql_backends!(a_claim_cut_off_before_its_payment_existed_is_finished_by_the_takeover);

/// What a request racing others under one key may be answered, counted
/// by kind: the one execution, byte-identical replays of it, and 409s while
/// it runs. Anything else fails the test.
#[derive(Debug, Default)]
struct RaceAnswers<'a> {
    executed: Vec<&'a Answer>,
    replayed: usize,
    in_progress: usize,
}

fn classify(answers: &[Answer]) -> RaceAnswers<'_> {
    let mut counted = RaceAnswers::default();
    for answer in answers {
        match (answer.status, answer.replayed) {
            (201, false) => counted.executed.push(answer),
            (201, true) => counted.replayed += 1,
            (409, false) => {
                assert_eq!(answer.error_code(), "IDEMPOTENCY_REQUEST_IN_PROGRESS");
                let retry_after: u64 = answer
                    .retry_after
                    .as_deref()
                    .expect("an in-progress answer says when to retry")
                    .parse()
                    .unwrap();
                assert!(retry_after >= 1, "Retry-After {retry_after}");
                counted.in_progress += 1;
            }
            other => panic!(
                "unexpected answer {other:?}: {}",
                String::from_utf8_lossy(&answer.body)
            ),
        }
    }
    assert_eq!(
        counted.executed.len(),
        1,
        "exactly one execution: {} executed, {} replayed, {} in progress",
        counted.executed.len(),
        counted.replayed,
        counted.in_progress
    );
    let original = &counted.executed[0].body;
    for answer in answers.iter().filter(|a| a.replayed) {
        assert_eq!(&answer.body, original, "replays carry the original body");
    }
    assert_eq!(
        1 + counted.replayed + counted.in_progress,
        answers.len(),
        "every answer counted once"
    );
    counted
}

async fn fifty_concurrent_identical_requests_over_two_processes_execute_once(backend: Backend) {
    let db = TestDb::new(backend).await;
    // One provider for both processes, so its ledger counts every charge.
    let sim = ProviderSim::start().await;
    let node_args = ["--provider-url", sim.url.as_str()];
    let a = NodeProcess::start(&db, &node_args, &[]).await;
    let b = NodeProcess::start(&db, &node_args, &[]).await;
    let client = reqwest::Client::new();
    let body = payment_body("acc_1", "42.00", "order-race");
    let answers = join_all((0..50).map(|i| {
        let url = if i % 2 == 0 { &a.url } else { &b.url };
        let request = post(&client, url, ACME_KEY, Some("k-race"), &body);
        async move { send(request).await }
    }))
    .await;

    let counted = classify(&answers);
    let ledger = sim.ledger().await;
    assert_eq!(ledger.len(), 1, "one charge: {ledger:?}");
    assert_eq!(
        ledger[0].idempotency_key,
        provider_key_of(counted.executed[0])
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 1);
    // In the raft mode the answer comes before the finish is written
    // (decision 0054): the payment takes its charge, and the outbox its
    // event, moments after.
    let charged = format!(
        "SELECT COUNT(*) FROM payments WHERE provider_charge_id = '{}'",
        ledger[0].id
    );
    for sql in [charged.as_str(), "SELECT COUNT(*) FROM outbox"] {
        let rows = eventually(Duration::from_secs(10), || async {
            let n = db.count(sql).await;
            (n >= 1).then_some(n)
        })
        .await;
        assert_eq!(rows, 1, "{sql}: the payment records the one charge");
    }
    a.kill().await;
    b.kill().await;
}

async fn twenty_keyless_duplicates_create_one_payment(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    // Twenty different keys (a client that forgot to reuse its key), one
    // business key.
    let body = payment_body("acc_1", "15.00", "order-keyless");
    let answers =
        join_all((0..20).map(|i| send(app.post(ACME_KEY, Some(&format!("keyless-{i}")), &body))))
            .await;

    let created: Vec<_> = answers.iter().filter(|a| a.status == 201).collect();
    assert_eq!(
        created.len(),
        1,
        "{:?}",
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    assert!(!created[0].replayed);
    let id = created[0].json()["id"].as_str().unwrap().to_owned();
    for answer in answers.iter().filter(|a| a.status != 201) {
        assert_eq!(
            (answer.status, answer.error_code().as_str(), answer.replayed),
            (409, "DUPLICATE_MERCHANT_REFERENCE", false)
        );
        assert_eq!(answer.json()["paymentId"], id.as_str());
    }
    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 1);
    assert_eq!(app.provider.approved_charges(), 1, "one charge");
    // Every answer, the winner's and each loser's, is replayed under its
    // own key: same status, same bytes.
    for (i, original) in answers.iter().enumerate() {
        let replay = send(app.post(ACME_KEY, Some(&format!("keyless-{i}")), &body)).await;
        assert_eq!(
            (replay.status, replay.replayed),
            (original.status, true),
            "keyless-{i}"
        );
        assert_eq!(replay.body, original.body, "keyless-{i}");
    }
    assert_eq!(app.provider.approved_charges(), 1, "replays charge nothing");
    app.stop().await;
}

async fn a_stale_in_progress_record_is_taken_over_exactly_once(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let body = payment_body("acc_1", "7.00", "order-stale");
    // The owner claimed (payment row written) and then "crashed".
    let orphan = claim_as_another_owner(&app, "k-stale", &body).await;
    app.advance(app.state.config.lease + Duration::from_millis(1))
        .await;

    let answers = join_all((0..10).map(|_| send(app.post(ACME_KEY, Some("k-stale"), &body)))).await;
    let counted = classify(&answers);
    let winner = counted.executed[0];
    assert_eq!(
        winner.json()["id"],
        orphan.payment_id.as_ref().unwrap().as_str(),
        "the takeover resumes the orphan's payment"
    );
    assert_eq!(app.metric("idempotency_takeover_count_total").await, 1.0);
    assert_eq!(app.provider.approved_charges(), 1, "one charge");
    assert!(
        app.provider
            .lookup(&provider_key_of(winner))
            .await
            .unwrap()
            .is_some(),
        "charged under the orphan's payment's key"
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 1);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments WHERE status = 'succeeded'")
            .await,
        1
    );
    app.stop().await;
}

async fn two_racing_takeovers_have_one_winner(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let body = payment_body("acc_1", "7.00", "order-duel");
    let orphan = claim_as_another_owner(&app, "k-duel", &body).await;
    app.advance(app.state.config.lease + Duration::from_millis(1))
        .await;

    let claim = takeover_claim(&app, &orphan);
    let store = &app.state.store.requests;
    let results = join_all((0..8).map(|_| store.reclaim(&orphan, Reclaim::Resume, &claim))).await;
    let winners = results.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
    assert_eq!(winners, 1, "{results:?}");
    let fences: HashSet<i64> = [store.load(&orphan.scope).await.unwrap().unwrap().fence].into();
    assert_eq!(
        fences,
        [orphan.fence + 1].into(),
        "one bump, by the one winner"
    );
    app.stop().await;
}

async fn a_stale_owner_cannot_complete_after_a_takeover(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let body = payment_body("acc_1", "7.00", "order-zombie");
    let zombie = claim_as_another_owner(&app, "k-zombie", &body).await;
    app.advance(app.state.config.lease + Duration::from_millis(1))
        .await;
    // A retry takes over and completes the payment.
    let retry = send(app.post(ACME_KEY, Some("k-zombie"), &body)).await;
    assert_eq!(retry.status, 201);

    // The old owner wakes up and tries to write: every write is refused.
    let store = &app.state.store.requests;
    let now = app.clock_now();
    assert!(matches!(
        store.advance(&zombie, Step::ProviderRequestSent, now).await,
        Err(StoreError::Fenced)
    ));
    let finish = forged_finish(now);
    assert!(matches!(
        store.finish(&zombie, &finish).await,
        Err(StoreError::Fenced)
    ));
    assert!(matches!(
        store.fail_retryable(&zombie, "X", now, now).await,
        Err(StoreError::Fenced)
    ));
    let replay = send(app.post(ACME_KEY, Some("k-zombie"), &body)).await;
    assert_eq!(
        (replay.status, replay.replayed, &replay.body),
        (201, true, &retry.body),
        "the completion was not overwritten"
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM outbox").await, 1);
    assert_eq!(app.provider.approved_charges(), 1, "one charge");
    app.stop().await;
}

fn takeover_claim(
    app: &TestApp,
    record: &once_node::idempotency::Record,
) -> once_node::store::Claim {
    use once_node::payments::command::Channel;
    use once_node::payments::model::NewPayment;
    once_node::store::Claim {
        scope: record.scope.clone(),
        fingerprint: once_node::idempotency::Fingerprint {
            version: record.fingerprint_version,
            hash: record.fingerprint.clone(),
        },
        payment: NewPayment {
            id: once_node::domain::PaymentId::generate(),
            tenant: record.scope.tenant.clone(),
            account_id: "acc_1".into(),
            merchant_reference: "unused".into(),
            amount: once_node::domain::Money::parse("7.00", "EUR").unwrap(),
            channel: Channel::Web,
            region: "test".into(),
        },
        now: app.clock_now(),
        lease: app.state.config.lease,
        trace_id: None,
        region: "test".into(),
        response_schema: app.state.config.response_schema,
    }
}

/// On PostgreSQL the claim is one statement; if the business key was taken,
/// a second statement drops the payment id from the record. A crash between
/// the two leaves a record naming a payment that was never created. The
/// takeover must settle it: create the payment if the business key is free,
/// otherwise answer DUPLICATE_MERCHANT_REFERENCE.
async fn a_claim_cut_off_before_its_payment_existed_is_finished_by_the_takeover(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let probe = db.pool().await;

    // Business key free: the takeover creates the payment under the record's id.
    let free = claim_as_another_owner(
        &app,
        "k-cut-free",
        &payment_body("acc_1", "3.00", "order-cut-free"),
    )
    .await;
    let free_id = free.payment_id.clone().unwrap();
    sqlx::query("DELETE FROM payments WHERE id = $1")
        .bind(free_id.as_str())
        .execute(&probe.pool)
        .await
        .unwrap();

    // Business key taken by a payment made meanwhile under another key.
    let taken = claim_as_another_owner(
        &app,
        "k-cut-taken",
        &payment_body("acc_1", "3.00", "order-cut-taken"),
    )
    .await;
    sqlx::query("DELETE FROM payments WHERE id = $1")
        .bind(taken.payment_id.as_ref().unwrap().as_str())
        .execute(&probe.pool)
        .await
        .unwrap();
    let other = send(app.post(
        ACME_KEY,
        Some("k-cut-other"),
        &payment_body("acc_1", "3.00", "order-cut-taken"),
    ))
    .await;
    assert_eq!(other.status, 201);

    app.advance(app.state.config.lease + Duration::from_millis(1))
        .await;
    let resumed = send(app.post(
        ACME_KEY,
        Some("k-cut-free"),
        &payment_body("acc_1", "3.00", "order-cut-free"),
    ))
    .await;
    assert_eq!(
        resumed.status,
        201,
        "{}",
        String::from_utf8_lossy(&resumed.body)
    );
    assert_eq!(resumed.json()["id"], free_id.as_str());
    let rejected = send(app.post(
        ACME_KEY,
        Some("k-cut-taken"),
        &payment_body("acc_1", "3.00", "order-cut-taken"),
    ))
    .await;
    assert_eq!(rejected.error_code(), "DUPLICATE_MERCHANT_REFERENCE");
    assert_eq!(rejected.json()["paymentId"], other.json()["id"]);
    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 2);
    app.stop().await;
}
