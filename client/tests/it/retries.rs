//! Retries: every attempt of a call is the same request (key, body bytes,
//! trace id), waits honour `Retry-After` and the deadline, and a call that
//! runs out of time says so with its key instead of guessing.

use std::time::{Duration, Instant};

use once_client::{
    AttemptError, Backoff, Client, CreatePayment, CreatePaymentErrorKind, IdempotencyKey,
    TraceParent,
};

use crate::fake_api::{FakeApi, Received, Step, payment};
use crate::{fast, recorded, send};

const BODY: &str =
    r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"order-1"}"#;

fn order() -> CreatePayment {
    CreatePayment::new("acc_1", "10.00", "EUR", "order-1")
}

/// One key, valid by the server's rules; the exact body bytes; one trace
/// with a new span per attempt; the credentials and version every time.
fn assert_one_request(received: &[Received]) -> String {
    assert!(!received.is_empty());
    let key = received[0].idempotency_key.clone().expect("a key");
    IdempotencyKey::parse(key.as_bytes()).expect("a key the server accepts");
    for (i, r) in received.iter().enumerate() {
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/payments"));
        assert_eq!(
            r.idempotency_key.as_deref(),
            Some(key.as_str()),
            "attempt {i}"
        );
        assert_eq!(r.body, BODY.as_bytes(), "attempt {i}: the same bytes");
        assert_eq!(r.trace_id(), received[0].trace_id(), "attempt {i}");
        assert_eq!(r.api_version.as_deref(), Some("2026-11-01"));
        assert_eq!(r.authorization.as_deref(), Some("Bearer sk_test_fake"));
    }
    let spans: std::collections::BTreeSet<_> =
        received.iter().map(|r| r.traceparent.clone()).collect();
    assert_eq!(spans.len(), received.len(), "a new span id per attempt");
    key
}

#[tokio::test]
async fn a_503_then_a_201_is_one_payment_under_one_key_and_one_body() {
    let api = FakeApi::start([
        Step::error(503, "SERVICE_UNAVAILABLE"),
        Step::answer(201, payment("pay_1", "order-1")),
    ])
    .await;
    let (client, attempts) = recorded(fast(&api.url));
    let created = client.create_payment(order()).await.unwrap();
    let received = api.received();
    assert_eq!(received.len(), 2);
    let key = assert_one_request(&received);
    assert_eq!(created.idempotency_key.as_str(), key);
    assert_eq!(created.payment.id, "pay_1");
    assert_eq!(created.attempts, 2);
    assert!(!created.replayed);
    let attempts = attempts.lock().unwrap();
    let seen: Vec<_> = attempts
        .iter()
        .map(|a| (a.number, a.status, a.error_code.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (1, Some(503), Some("SERVICE_UNAVAILABLE")),
            (2, Some(201), None)
        ]
    );
    assert!(
        attempts
            .iter()
            .all(|a| a.idempotency_key.as_ref().map(IdempotencyKey::as_str) == Some(&key))
    );
    assert_eq!(attempts[1].payment_id.as_deref(), Some("pay_1"));
}

#[tokio::test]
async fn a_429_is_retried_no_sooner_than_its_retry_after() {
    let api = FakeApi::start([
        Step::error(429, "RATE_LIMITED").header("retry-after", "1"),
        Step::answer(201, payment("pay_1", "order-1")),
    ])
    .await;
    let client = Client::builder(&api.url, "sk_test_fake")
        .backoff(Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_secs(5),
            multiplier: 2.0,
        })
        .build()
        .unwrap();
    client.create_payment(order()).await.unwrap();
    let received = api.received();
    assert_one_request(&received);
    let waited = received[1].at - received[0].at;
    assert!(waited >= Duration::from_secs(1), "waited only {waited:?}");
    assert!(
        waited < Duration::from_millis(1500),
        "a floor, not a sentence: {waited:?}"
    );
}

#[tokio::test]
async fn a_409_in_progress_is_retried_until_the_first_request_has_finished() {
    let in_progress =
        Step::error(409, "IDEMPOTENCY_REQUEST_IN_PROGRESS").header("retry-after", "1");
    let api = FakeApi::start([
        in_progress.clone(),
        in_progress,
        Step::answer(201, payment("pay_1", "order-1")).header("idempotent-replayed", "true"),
    ])
    .await;
    let created = send(&api, order()).await.unwrap();
    assert_one_request(&api.received());
    assert_eq!(created.attempts, 3);
    assert!(created.replayed, "the answer the first request stored");
}

#[tokio::test]
async fn a_202_is_polled_with_the_same_post_until_the_outcome_is_known() {
    let pending = Step::answer(
        202,
        r#"{"status":"processing","paymentId":"pay_7","message":"retry"}"#,
    )
    .header("retry-after", "1");
    let api = FakeApi::start([
        pending.clone(),
        pending,
        Step::answer(201, payment("pay_7", "order-1"))
            .header("idempotent-replayed", "true")
            .header("x-once-region", "us"),
    ])
    .await;
    let (client, attempts) = recorded(fast(&api.url));
    let created = client.create_payment(order()).await.unwrap();
    let received = api.received();
    assert_eq!(received.len(), 3);
    assert_one_request(&received);
    assert_eq!(created.payment.id, "pay_7");
    assert_eq!(created.region.as_deref(), Some("us"));
    let attempts = attempts.lock().unwrap();
    assert_eq!(attempts[0].payment_id.as_deref(), Some("pay_7"));
    assert_eq!(attempts[0].retry_after, Some(Duration::from_secs(1)));
    assert_eq!(attempts[2].region.as_deref(), Some("us"));
    assert!(attempts[2].replayed);
}

#[tokio::test]
async fn a_connection_dropped_mid_request_is_retried_under_the_same_key() {
    let api = FakeApi::start([Step::Drop, Step::answer(201, payment("pay_1", "order-1"))]).await;
    let (client, attempts) = recorded(fast(&api.url));
    let created = client.create_payment(order()).await.unwrap();
    assert_one_request(&api.received());
    assert_eq!(created.attempts, 2);
    let attempts = attempts.lock().unwrap();
    assert_eq!(attempts[0].status, None);
    assert!(
        attempts[0].transport_error.is_some(),
        "the drop is reported: {:?}",
        attempts[0]
    );
}

#[tokio::test]
async fn a_201_cut_off_mid_body_is_not_an_answer_and_is_asked_again() {
    let api = FakeApi::start([
        Step::CutBody { status: 201 },
        Step::answer(201, payment("pay_1", "order-1")).header("idempotent-replayed", "true"),
    ])
    .await;
    let created = send(&api, order()).await.unwrap();
    assert_one_request(&api.received());
    assert_eq!((created.attempts, created.replayed), (2, true));
}

#[tokio::test]
async fn a_hanging_server_ends_indeterminate_with_the_key_and_the_key_later_gets_the_answer() {
    let api = FakeApi::start([Step::Hang]).await;
    let client = fast(&api.url)
        .deadline(Duration::from_secs(1))
        .attempt_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let error = client.create_payment(order()).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(1300),
        "ends at the deadline, not before or long after: {took:?}"
    );
    let received = api.received();
    let key = assert_one_request(&received);
    assert!(received.len() >= 3, "attempts were cut and retried");
    assert!(error.is_indeterminate(), "{error}");
    assert_eq!(error.idempotency_key.as_str(), key);
    assert_eq!(error.attempts as usize, received.len());
    assert_eq!(error.status, None);
    let CreatePaymentErrorKind::Indeterminate { last_error, .. } = &error.kind else {
        unreachable!()
    };
    assert!(last_error.is_timeout(), "{last_error}");

    // Later, the same request under that key gets the stored answer.
    api.then(
        [Step::answer(201, payment("pay_1", "order-1")).header("idempotent-replayed", "true")],
    );
    let created = client
        .create_payment(order().idempotency_key(error.idempotency_key.clone()))
        .await
        .unwrap();
    assert_eq!(created.idempotency_key.as_str(), key);
    assert!(created.replayed);
    // A new logical call: its own trace, the same key and bytes.
    assert_eq!(assert_one_request(&api.received()[received.len()..]), key);
}

#[tokio::test]
async fn a_call_given_an_earlier_end_stops_there_and_the_observer_sees_every_body() {
    let api = FakeApi::start([
        Step::error(503, "SERVICE_UNAVAILABLE"),
        Step::answer(201, payment("pay_1", "order-1")),
    ])
    .await;
    let (client, attempts) = recorded(fast(&api.url).deadline(Duration::from_secs(30)));
    let payment = order();
    let sent = payment.body();
    client.create_payment(payment).await.unwrap();
    let received = api.received();
    let attempts = attempts.lock().unwrap().clone();
    assert_eq!(attempts.len(), 2);
    for (attempt, request) in attempts.iter().zip(&received) {
        assert_eq!(request.body, sent, "body() is what every attempt sends");
        let body = attempt.body.as_ref().expect("an answer came");
        assert!(!body.is_empty());
    }
    assert!(
        String::from_utf8_lossy(attempts[1].body.as_ref().unwrap()).contains("pay_1"),
        "the observer gets the answer's bytes"
    );

    // A hanging server, a 30 s client deadline, a call that must end in 500 ms.
    api.then([Step::Hang]);
    let started = Instant::now();
    let error = client
        .create_payment(order().until(tokio::time::Instant::now() + Duration::from_millis(500)))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(error.is_indeterminate(), "{error}");
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_millis(900),
        "ends at the call's own end: {took:?}"
    );
}

#[tokio::test]
async fn a_retry_after_past_the_deadline_ends_the_call_at_once() {
    let api =
        FakeApi::start([Step::error(503, "SERVICE_OVERLOADED").header("retry-after", "10")]).await;
    let client = Client::builder(&api.url, "sk_test_fake")
        .deadline(Duration::from_secs(3))
        .backoff(Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_secs(30),
            multiplier: 2.0,
        })
        .build()
        .unwrap();
    let started = Instant::now();
    let error = client.create_payment(order()).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "no pointless wait"
    );
    assert_eq!((error.attempts, error.status), (1, Some(503)));
    match error.kind {
        CreatePaymentErrorKind::Indeterminate {
            last_error:
                AttemptError::Retryable {
                    status,
                    code,
                    retry_after,
                    ..
                },
            ..
        } => {
            assert_eq!(status, 503);
            assert_eq!(code.as_deref(), Some("SERVICE_OVERLOADED"));
            assert_eq!(retry_after, Some(Duration::from_secs(10)));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn one_attempt_means_no_retry() {
    let api = FakeApi::start([
        Step::error(503, "SERVICE_UNAVAILABLE"),
        Step::answer(201, payment("pay_1", "order-1")),
    ])
    .await;
    let error = fast(&api.url)
        .max_attempts(1)
        .build()
        .unwrap()
        .create_payment(order())
        .await
        .unwrap_err();
    assert_eq!(api.received().len(), 1);
    assert!(error.is_indeterminate());
    assert_eq!(error.status, Some(503));
}

#[tokio::test]
async fn a_callers_key_and_traceparent_are_sent_unchanged() {
    let api = FakeApi::start([
        Step::error(421, "MISDIRECTED_REQUEST"),
        Step::answer(201, payment("pay_1", "order-1")),
    ])
    .await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let key = IdempotencyKey::parse(b"order-1 / attempt ~1").unwrap();
    let created = fast(&api.url)
        .build()
        .unwrap()
        .create_payment(
            order()
                .idempotency_key(key.clone())
                .traceparent(TraceParent::parse(traceparent).unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(created.idempotency_key, key);
    for r in api.received() {
        assert_eq!(r.idempotency_key.as_deref(), Some(key.as_str()));
        assert_eq!(r.traceparent.as_deref(), Some(traceparent));
        assert_eq!(r.body, BODY.as_bytes());
    }
    assert_eq!(api.received().len(), 2);
}
