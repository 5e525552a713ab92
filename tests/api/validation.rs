//! Bad input gets its documented 4xx and changes nothing: no record, no
//! payment. The same key with a valid body then executes normally.

use crate::helpers::*;
use crate::on_every_backend;

on_every_backend!(
    bad_input_changes_nothing,
    authentication_failures_write_nothing
);

async fn nothing_written(db: &TestDb) {
    assert_eq!(db.records().await.len(), 0);
    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 0);
}

async fn bad_input_changes_nothing(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let valid = payment_body("acc_1", "10.00", "order-v");
    let with = |field: &str| valid.replacen('{', &format!("{{{field},"), 1);
    let cases: Vec<(String, u16, &str)> = vec![
        ("{".into(), 400, "VALIDATION_FAILED"),
        ("not json".into(), 400, "VALIDATION_FAILED"),
        ("[]".into(), 400, "VALIDATION_FAILED"),
        (with(r#""tip":"1.00""#), 422, "VALIDATION_FAILED"),
        (
            r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR"}"#.into(),
            422,
            "VALIDATION_FAILED",
        ),
        (
            valid.replace(r#""10.00""#, "10.00"),
            422,
            "VALIDATION_FAILED",
        ),
        (valid.replace("10.00", "1e1"), 422, "VALIDATION_FAILED"),
        (valid.replace("10.00", "-10.00"), 422, "VALIDATION_FAILED"),
        (valid.replace("10.00", "+10.00"), 422, "VALIDATION_FAILED"),
        (valid.replace("10.00", "0.00"), 422, "VALIDATION_FAILED"),
        (valid.replace("10.00", "10.001"), 422, "VALIDATION_FAILED"),
        (valid.replace("EUR", "EURO"), 422, "VALIDATION_FAILED"),
        (valid.replace("EUR", "XYZ"), 422, "VALIDATION_FAILED"),
        (valid.replace("acc_1", "acc 1"), 422, "VALIDATION_FAILED"),
        (with(r#""channel":"fax""#), 422, "VALIDATION_FAILED"),
        (with(r#""accountId":"dup""#), 422, "VALIDATION_FAILED"),
        (
            format!(
                r#"{{"accountId":"acc_1","amount":"1.00","currency":"EUR","merchantReference":"{}"}}"#,
                "r".repeat(20_000)
            ),
            413,
            "PAYLOAD_TOO_LARGE",
        ),
    ];
    for (body, status, code) in &cases {
        let answer = send(app.post(ACME_KEY, Some("k-bad"), body)).await;
        assert_eq!(
            (answer.status, answer.error_code().as_str()),
            (*status, *code),
            "body: {}",
            &body[..body.len().min(120)]
        );
        assert!(!answer.json()["message"].as_str().unwrap().is_empty());
    }
    let key_cases: Vec<(Option<String>, &str)> = vec![
        (None, "IDEMPOTENCY_KEY_REQUIRED"),
        (Some(String::new()), "IDEMPOTENCY_KEY_INVALID"),
        (Some("k".repeat(256)), "IDEMPOTENCY_KEY_INVALID"),
    ];
    for (key, code) in &key_cases {
        let answer = send(app.post(ACME_KEY, key.as_deref(), &valid)).await;
        assert_eq!((answer.status, answer.error_code().as_str()), (400, *code));
    }
    // Non-ASCII bytes in the header: built by hand, since clients refuse them.
    let raw = reqwest::header::HeaderValue::from_bytes("clé".as_bytes()).unwrap();
    let answer = send(
        app.client
            .post(format!("{}/payments", app.url))
            .bearer_auth(ACME_KEY)
            .header("idempotency-key", raw)
            .body(valid.clone()),
    )
    .await;
    assert_eq!(
        (answer.status, answer.error_code().as_str()),
        (400, "IDEMPOTENCY_KEY_INVALID")
    );

    nothing_written(&db).await;
    // Field names in messages, so a client can fix its request.
    let answer = send(app.post(
        ACME_KEY,
        Some("k-bad"),
        &valid.replace(r#""10.00""#, "10.00"),
    ))
    .await;
    assert!(
        answer.json()["message"]
            .as_str()
            .unwrap()
            .contains("amount")
    );

    let good = send(app.post(ACME_KEY, Some("k-bad"), &valid)).await;
    assert_eq!(
        (good.status, good.replayed),
        (201, false),
        "the key was never burnt by bad input"
    );
    app.stop().await;
}

async fn authentication_failures_write_nothing(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let valid = payment_body("acc_1", "10.00", "order-a");
    let no_auth = app
        .client
        .post(format!("{}/payments", app.url))
        .header("idempotency-key", "k-a")
        .body(valid.clone());
    let answers = [
        send(no_auth).await,
        send(app.post("sk_test_not_a_real_key_000", Some("k-a"), &valid)).await,
        send(
            app.client
                .post(format!("{}/payments", app.url))
                .header("authorization", format!("Basic {ACME_KEY}"))
                .header("idempotency-key", "k-a")
                .body(valid.clone()),
        )
        .await,
    ];
    for answer in &answers {
        assert_eq!(
            (answer.status, answer.error_code().as_str()),
            (401, "UNAUTHORIZED")
        );
    }
    nothing_written(&db).await;
    let unknown_route = app
        .client
        .get(format!("{}/nope", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown_route.status(), 404);
    let good = send(app.post(ACME_KEY, Some("k-a"), &valid)).await;
    assert_eq!(good.status, 201);
    app.stop().await;
}
