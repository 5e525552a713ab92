//! The decision table of DESIGN §4, one scenario per row.

use std::time::Duration;

use crate::helpers::*;
use crate::on_every_backend;

on_every_backend!(
    a_completed_payment_replays_byte_for_byte,
    equal_commands_written_differently_replay,
    a_different_command_under_the_same_key_is_rejected,
    a_declined_payment_replays_its_402,
    a_request_in_progress_answers_409_with_retry_after,
    a_retry_after_the_window_is_a_new_operation_still_guarded_by_the_business_key,
    the_sweeper_purges_answers_and_later_metadata_in_batches,
    replays_keep_the_schema_version_they_were_rendered_with,
    the_quoted_and_bare_forms_of_a_key_replay_each_other,
);

async fn a_completed_payment_replays_byte_for_byte(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let body = payment_body("acc_1", "10.00", "order-1");

    let first = send(app.post(ACME_KEY, Some("k-1"), &body)).await;
    assert_eq!(first.status, 201);
    assert!(!first.replayed);
    let second = send(app.post(ACME_KEY, Some("k-1"), &body)).await;
    assert_eq!(second.status, 201);
    assert!(second.replayed, "a replay says so");
    assert_eq!(
        second.body, first.body,
        "the replay is the original body, byte for byte"
    );

    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 1);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox").await,
        1,
        "one event for one payment"
    );
    assert_eq!(app.metric("idempotency_replay_count_total").await, 1.0);
    assert_eq!(app.provider.approved_charges(), 1, "one charge");
    let id = first.json()["id"].as_str().unwrap().to_owned();
    let fetched = app
        .client
        .get(format!("{}/payments/{id}", app.url))
        .bearer_auth(ACME_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(fetched.status(), 200);
    app.stop().await;
}

async fn equal_commands_written_differently_replay(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let first = send(app.post(
        ACME_KEY,
        Some("k-eq"),
        &payment_body("acc_1", "10.00", "order-eq"),
    ))
    .await;
    assert_eq!(first.status, 201);
    let equivalents = [
        // reordered fields and extra whitespace
        r#"{ "merchantReference" : "order-eq",   "currency":"EUR", "amount":"10.00", "accountId":"acc_1" }"#,
        // 10.0 == 10.00
        r#"{"accountId":"acc_1","amount":"10.0","currency":"EUR","merchantReference":"order-eq"}"#,
        // eur == EUR
        r#"{"accountId":"acc_1","amount":"10.00","currency":"eur","merchantReference":"order-eq"}"#,
        // the default channel, spelled out
        r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"order-eq","channel":"web"}"#,
    ];
    for body in equivalents {
        let again = send(app.post(ACME_KEY, Some("k-eq"), body)).await;
        assert_eq!((again.status, again.replayed), (201, true), "{body}");
        assert_eq!(again.body, first.body, "{body}");
    }
    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 1);
    app.stop().await;
}

async fn a_different_command_under_the_same_key_is_rejected(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let first = send(app.post(
        ACME_KEY,
        Some("k-diff"),
        &payment_body("acc_1", "10.00", "order-d"),
    ))
    .await;
    assert_eq!(first.status, 201);
    let different = [
        payment_body("acc_1", "10.01", "order-d"),
        r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"order-d","channel":"pos"}"#.to_owned(),
        payment_body("acc_2", "10.00", "order-d"),
    ];
    for body in &different {
        let answer = send(app.post(ACME_KEY, Some("k-diff"), body)).await;
        assert_eq!(answer.status, 409, "{body}");
        assert_eq!(
            answer.error_code(),
            "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST"
        );
        assert!(!answer.replayed);
    }
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments").await,
        1,
        "never an execution"
    );
    assert_eq!(
        app.metric("idempotency_conflict_different_request_count_total")
            .await,
        3.0
    );
    // The original still replays.
    let replay = send(app.post(
        ACME_KEY,
        Some("k-diff"),
        &payment_body("acc_1", "10.00", "order-d"),
    ))
    .await;
    assert_eq!(replay.body, first.body);
    app.stop().await;
}

async fn a_declined_payment_replays_its_402(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let body = payment_body("acc_nofunds_7", "99.00", "order-poor");
    let first = send(app.post(ACME_KEY, Some("k-poor"), &body)).await;
    assert_eq!(first.status, 402);
    assert_eq!(first.error_code(), "INSUFFICIENT_FUNDS");
    let again = send(app.post(ACME_KEY, Some("k-poor"), &body)).await;
    assert_eq!((again.status, again.replayed), (402, true));
    assert_eq!(again.body, first.body);
    assert_eq!(db.count_records("FAILED_REPLAYABLE").await, 1);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments WHERE status = 'declined'")
            .await,
        1
    );
    assert_eq!(app.provider.approved_charges(), 0, "a decline is no charge");
    app.stop().await;
}

/// A record someone else holds, claimed straight through the store as if
/// its owner were mid-flight (or had crashed right after claiming).
pub async fn claim_as_another_owner(
    app: &TestApp,
    key: &str,
    body: &str,
) -> once_node::idempotency::Record {
    use once_node::store::ClaimOutcome;

    match app
        .state
        .store
        .requests
        .claim(&acme_claim(app, key, body))
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed(owned) => owned.record,
        other => panic!("expected a fresh claim, got {other:?}"),
    }
}

/// The claim a request of tenant `acme` (principal `checkout`) with this
/// key and body makes, at the app's time, with a fresh payment id.
pub fn acme_claim(app: &TestApp, key: &str, body: &str) -> once_node::store::Claim {
    use once_node::idempotency::Scope;
    use once_node::payments::command::{Channel, CreatePayment};
    use once_node::payments::model::NewPayment;
    use once_node::store::Claim;

    let command = CreatePayment::parse(body.as_bytes()).unwrap();
    let tenant = once_node::domain::TenantId::parse("acme").unwrap();
    Claim {
        scope: Scope {
            tenant: tenant.clone(),
            principal: once_node::domain::PrincipalId::parse("checkout").unwrap(),
            operation: once_node::engine::execute::OPERATION,
            key: once_node::domain::IdempotencyKey::parse(key.as_bytes()).unwrap(),
        },
        fingerprint: command.fingerprint(1, "2026-11-01").unwrap(),
        payment: NewPayment {
            id: once_node::domain::PaymentId::generate(),
            tenant,
            account_id: command.account_id.clone(),
            merchant_reference: command.merchant_reference.clone(),
            amount: command.amount,
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

impl TestApp {
    pub fn clock_now(&self) -> once_node::domain::UnixMillis {
        use once_node::domain::Clock;
        self.clock.now()
    }
}

async fn a_request_in_progress_answers_409_with_retry_after(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let body = payment_body("acc_1", "5.00", "order-busy");
    claim_as_another_owner(&app, "k-busy", &body).await;

    let answer = send(app.post(ACME_KEY, Some("k-busy"), &body)).await;
    assert_eq!(answer.status, 409);
    assert_eq!(answer.error_code(), "IDEMPOTENCY_REQUEST_IN_PROGRESS");
    let retry_after: u64 = answer.retry_after.expect("Retry-After").parse().unwrap();
    assert!(
        (1..=5).contains(&retry_after),
        "Retry-After {retry_after} is within the 5 s lease"
    );
    // A different body under the busy key is still a mismatch, not "in progress".
    let other = send(app.post(
        ACME_KEY,
        Some("k-busy"),
        &payment_body("acc_1", "6.00", "order-busy"),
    ))
    .await;
    assert_eq!(
        (other.status, other.error_code().as_str()),
        (409, "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST")
    );
    assert_eq!(app.provider.approved_charges(), 0, "nothing was charged");
    app.stop().await;
}

async fn a_retry_after_the_window_is_a_new_operation_still_guarded_by_the_business_key(
    backend: Backend,
) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let body = payment_body("acc_1", "10.00", "order-old");
    let first = send(app.post(ACME_KEY, Some("k-old"), &body)).await;
    assert_eq!(first.status, 201);
    let original_id = first.json()["id"].as_str().unwrap().to_owned();

    app.advance(Duration::from_secs(24 * 3600 + 1)).await;
    let late = send(app.post(ACME_KEY, Some("k-old"), &body)).await;
    assert!(!late.replayed, "past the window nothing is replayed");
    assert_eq!(late.status, 409);
    assert_eq!(late.error_code(), "DUPLICATE_MERCHANT_REFERENCE");
    assert_eq!(
        late.json()["paymentId"],
        original_id.as_str(),
        "the business key points at the original payment"
    );
    assert_eq!(
        app.metric("idempotency_expired_retry_count_total").await,
        1.0
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 1);
    assert_eq!(
        app.provider.approved_charges(),
        1,
        "the late retry charged nothing"
    );

    // An expired key with a genuinely new command runs as a new payment.
    app.advance(Duration::from_secs(24 * 3600 + 1)).await;
    let fresh = send(app.post(
        ACME_KEY,
        Some("k-old"),
        &payment_body("acc_1", "12.00", "order-new"),
    ))
    .await;
    assert_eq!(fresh.status, 201);
    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 2);
    assert_eq!(app.provider.approved_charges(), 2);
    app.stop().await;
}

async fn the_sweeper_purges_answers_and_later_metadata_in_batches(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn_with(&db, |c| c.sweep_batch = 2).await;
    for i in 0..5 {
        let answer = send(app.post(
            ACME_KEY,
            Some(&format!("k-sweep-{i}")),
            &payment_body("acc_1", "1.00", &format!("sweep-{i}")),
        ))
        .await;
        assert_eq!(answer.status, 201);
    }
    let (expired, purged) = once_node::sweeper::sweep_once(&app.state).await.unwrap();
    assert_eq!(
        (expired, purged),
        (0, 0),
        "nothing is due inside the window"
    );

    app.advance(Duration::from_secs(24 * 3600 + 1)).await;
    let (expired, purged) = once_node::sweeper::sweep_once(&app.state).await.unwrap();
    assert_eq!((expired, purged), (5, 0), "all five expire, two at a time");
    assert_eq!(
        db.records()
            .await
            .iter()
            .filter(|r| r.status == "EXPIRED" && !r.has_response)
            .count(),
        5
    );
    // An expired record is not a replay any more: the retry is a new
    // operation, stopped by the business key.
    let late = send(app.post(
        ACME_KEY,
        Some("k-sweep-0"),
        &payment_body("acc_1", "1.00", "sweep-0"),
    ))
    .await;
    assert_eq!(
        (late.status, late.error_code().as_str(), late.replayed),
        (409, "DUPLICATE_MERCHANT_REFERENCE", false)
    );

    app.advance(Duration::from_secs(7 * 24 * 3600 + 1)).await;
    let (_, purged) = once_node::sweeper::sweep_once(&app.state).await.unwrap();
    assert_eq!(
        purged, 4,
        "metadata goes after its retention; the renewed key stays"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments").await,
        5,
        "payments are never swept"
    );
    app.stop().await;
}

async fn replays_keep_the_schema_version_they_were_rendered_with(backend: Backend) {
    let db = TestDb::new(backend).await;
    let body = payment_body("acc_1", "10.00", "order-v1");
    let v1 = TestApp::spawn_with(&db, |c| c.response_schema = schema(1)).await;
    let first = send(v1.post(ACME_KEY, Some("k-v1"), &body)).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.json()["amount"], "10.00", "v1 renders a flat amount");
    v1.stop().await;

    // A deploy changes the response shape.
    let v2 = TestApp::spawn_with(&db, |c| c.response_schema = schema(2)).await;
    let replay = send(v2.post(ACME_KEY, Some("k-v1"), &body)).await;
    assert_eq!((replay.status, replay.replayed), (201, true));
    assert_eq!(
        replay.body, first.body,
        "the stored v1 body is replayed unchanged"
    );
    let fresh = send(v2.post(
        ACME_KEY,
        Some("k-v2"),
        &payment_body("acc_1", "10.00", "order-v2"),
    ))
    .await;
    assert_eq!(
        fresh.json()["amount"]["minorUnits"],
        1000,
        "new answers use v2"
    );
    assert_eq!(
        db.records()
            .await
            .iter()
            .filter(|r| r.schema_version == Some(1))
            .count(),
        1
    );
    v2.stop().await;
}

/// The IETF draft sends `Idempotency-Key` as an RFC 8941 sf-string; clients
/// written before it send the key bare. Both name one key (decision 0074):
/// whichever form comes first, the other replays its answer byte for byte.
async fn the_quoted_and_bare_forms_of_a_key_replay_each_other(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    // (the form sent first, the form of its retry); the last key has an
    // escaped quote and backslash, which the bare form carries as they are.
    let pairs = [
        ("k-sf-1", r#""k-sf-1""#),
        (r#""k-sf-2""#, "k-sf-2"),
        (r#""k \"sf\" 3\\""#, r#"k "sf" 3\"#),
    ];
    for (i, (first_form, retry_form)) in pairs.into_iter().enumerate() {
        let body = payment_body("acc_1", "10.00", &format!("order-sf-{i}"));
        let first = send(app.post(ACME_KEY, Some(first_form), &body)).await;
        assert_eq!((first.status, first.replayed), (201, false), "{first_form}");
        let retry = send(app.post(ACME_KEY, Some(retry_form), &body)).await;
        assert_eq!(
            (retry.status, retry.replayed),
            (201, true),
            "{retry_form} replays {first_form}: {}",
            String::from_utf8_lossy(&retry.body)
        );
        assert_eq!(retry.body, first.body, "{retry_form} after {first_form}");
        // Another body under the other form is the same key's mismatch.
        let other = payment_body("acc_1", "10.01", &format!("order-sf-{i}"));
        let mismatch = send(app.post(ACME_KEY, Some(retry_form), &other)).await;
        assert_eq!(
            (mismatch.status, mismatch.error_code().as_str()),
            (409, "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST")
        );
    }
    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 3);
    assert_eq!(app.provider.approved_charges(), 3, "one charge per key");

    // A value that starts as an sf-string and is not one is refused before
    // anything is written, with its own code.
    let body = payment_body("acc_1", "10.00", "order-sf-malformed");
    for malformed in [r#""k-sf-4"#, r#""k-sf-4";p=1"#, r#""k\x""#] {
        let refused = send(app.post(ACME_KEY, Some(malformed), &body)).await;
        assert_eq!(
            (refused.status, refused.error_code().as_str()),
            (400, "IDEMPOTENCY_KEY_MALFORMED"),
            "{malformed}"
        );
    }
    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 3);
    let after = send(app.post(ACME_KEY, Some("k-sf-4"), &body)).await;
    assert_eq!((after.status, after.replayed), (201, false));
    app.stop().await;
}
