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

fn message_of(answer: &Answer) -> String {
    answer.json()["message"]
        .as_str()
        .expect("an error has a message")
        .to_owned()
}

/// Whether `message` names `field` as the one at fault: as the prefix of a
/// field's own check (`amount: …`), or quoted by the JSON decoder
/// (``unknown field `tip` ``, ``missing field `merchantReference` ``). A
/// field that merely appears in a list of expected ones does not count.
fn names_field(message: &str, field: &str) -> bool {
    if message.starts_with(&format!("{field}: ")) {
        return true;
    }
    ["unknown field", "missing field", "duplicate field"]
        .iter()
        .any(|what| message.starts_with(&format!("{what} `{field}`")))
}

async fn bad_input_changes_nothing(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let valid = payment_body("acc_1", "10.00", "order-v");
    let with = |field: &str| valid.replacen('{', &format!("{{{field},"), 1);
    // Malformed bodies (400) have no field to name.
    let malformed = ["{", "not json", "[]"];
    for body in malformed {
        let answer = send(app.post(ACME_KEY, Some("k-bad"), body)).await;
        assert_eq!(
            (answer.status, answer.error_code().as_str()),
            (400, "VALIDATION_FAILED"),
            "body: {body}"
        );
        assert!(!message_of(&answer).is_empty(), "body: {body}");
    }
    // Invalid commands (422): the message names the offending field.
    let invalid: Vec<(String, &str)> = vec![
        (with(r#""tip":"1.00""#), "tip"),
        (
            r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR"}"#.into(),
            "merchantReference",
        ),
        (valid.replace(r#""10.00""#, "10.00"), "amount"),
        (valid.replace("10.00", "1e1"), "amount"),
        (valid.replace("10.00", "-10.00"), "amount"),
        (valid.replace("10.00", "+10.00"), "amount"),
        (valid.replace("10.00", "0.00"), "amount"),
        (valid.replace("10.00", "10.001"), "amount"),
        (valid.replace("EUR", "EURO"), "currency"),
        (valid.replace("EUR", "XYZ"), "currency"),
        (valid.replace("acc_1", "acc 1"), "accountId"),
        (with(r#""channel":"fax""#), "channel"),
        (with(r#""accountId":"dup""#), "accountId"),
    ];
    for (body, field) in &invalid {
        let answer = send(app.post(ACME_KEY, Some("k-bad"), body)).await;
        assert_eq!(
            (answer.status, answer.error_code().as_str()),
            (422, "VALIDATION_FAILED"),
            "body: {body}"
        );
        let message = message_of(&answer);
        assert!(
            names_field(&message, field),
            "the message {message:?} names the field {field}; body: {body}"
        );
    }
    let too_large = format!(
        r#"{{"accountId":"acc_1","amount":"1.00","currency":"EUR","merchantReference":"{}"}}"#,
        "r".repeat(20_000)
    );
    let answer = send(app.post(ACME_KEY, Some("k-bad"), &too_large)).await;
    assert_eq!(
        (answer.status, answer.error_code().as_str()),
        (413, "PAYLOAD_TOO_LARGE")
    );
    assert!(!message_of(&answer).is_empty());
    let key_cases: Vec<(Option<String>, &str)> = vec![
        (None, "IDEMPOTENCY_KEY_REQUIRED"),
        (Some(String::new()), "IDEMPOTENCY_KEY_INVALID"),
        (Some("k".repeat(256)), "IDEMPOTENCY_KEY_INVALID"),
        // The IETF draft's form: well-formed but empty, then malformed.
        (Some(r#""""#.into()), "IDEMPOTENCY_KEY_INVALID"),
        (Some(r#""k-bad"#.into()), "IDEMPOTENCY_KEY_MALFORMED"),
        (Some(r#""k-bad";v=1"#.into()), "IDEMPOTENCY_KEY_MALFORMED"),
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
    // ... and inside the draft's quotes, where they are no sf-string.
    let raw = reqwest::header::HeaderValue::from_bytes("\"clé\"".as_bytes()).unwrap();
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
        (400, "IDEMPOTENCY_KEY_MALFORMED")
    );

    nothing_written(&db).await;

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

/// A path segment that cannot name a payment, even one that is not UTF-8
/// once percent-decoded, is `404 PAYMENT_NOT_FOUND` in the API's error
/// shape (it was axum's plain-text `400` before the API document was
/// checked against the server).
#[tokio::test]
async fn ids_that_cannot_name_a_payment_are_404_in_the_error_shape() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = TestApp::spawn(&db).await;
    let absent = format!("pay_{}", "0".repeat(32));
    for id in ["%FF", "%C3%28", "not-an-id", absent.as_str()] {
        let answer = send(
            app.client
                .get(format!("{}/payments/{id}", app.url))
                .bearer_auth(ACME_KEY),
        )
        .await;
        assert_eq!(
            (answer.status, answer.error_code().as_str()),
            (404, "PAYMENT_NOT_FOUND"),
            "id {id}"
        );
    }
    app.stop().await;
}
