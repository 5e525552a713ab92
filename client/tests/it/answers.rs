//! Final answers: each refusal of the contract becomes its typed error after
//! one attempt (retrying cannot change it), with the call's key; and
//! `get_payment` reads a payment or says it does not exist.

use once_client::{
    CreatePayment, CreatePaymentErrorKind as Kind, GetPaymentError, IdempotencyKey, PaymentStatus,
};

use crate::fake_api::{FakeApi, Step, payment};
use crate::{fast, send};

fn order() -> CreatePayment {
    CreatePayment::new("acc_1", "10.00", "EUR", "order-1")
}

#[tokio::test]
async fn each_refusal_is_its_own_error_after_one_attempt() {
    let duplicate =
        r#"{"errorCode":"DUPLICATE_MERCHANT_REFERENCE","message":"taken","paymentId":"pay_old"}"#;
    let declined = r#"{"errorCode":"INSUFFICIENT_FUNDS","message":"declined (insufficient_funds)","paymentId":"pay_9"}"#;
    let cases: Vec<(Step, Kind)> = vec![
        (
            Step::error(409, "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST"),
            Kind::Mismatch {
                message: "fake IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST".into(),
            },
        ),
        (
            Step::answer(409, duplicate),
            Kind::DuplicateMerchantReference {
                payment_id: "pay_old".into(),
                message: "taken".into(),
            },
        ),
        (
            Step::answer(402, declined).header("idempotent-replayed", "true"),
            Kind::Declined {
                payment_id: Some("pay_9".into()),
                code: "INSUFFICIENT_FUNDS".into(),
                message: "declined (insufficient_funds)".into(),
            },
        ),
        (
            Step::error(422, "VALIDATION_FAILED"),
            Kind::Validation {
                status: 422,
                code: "VALIDATION_FAILED".into(),
                message: "fake VALIDATION_FAILED".into(),
            },
        ),
        (
            Step::error(400, "VALIDATION_FAILED"),
            Kind::Validation {
                status: 400,
                code: "VALIDATION_FAILED".into(),
                message: "fake VALIDATION_FAILED".into(),
            },
        ),
        (
            Step::error(413, "PAYLOAD_TOO_LARGE"),
            Kind::Validation {
                status: 413,
                code: "PAYLOAD_TOO_LARGE".into(),
                message: "fake PAYLOAD_TOO_LARGE".into(),
            },
        ),
        (
            Step::error(401, "UNAUTHORIZED"),
            Kind::Unauthorized {
                message: "fake UNAUTHORIZED".into(),
            },
        ),
        (
            Step::error(404, "NOT_FOUND"),
            Kind::Unexpected {
                status: 404,
                code: Some("NOT_FOUND".into()),
                message: "fake NOT_FOUND".into(),
            },
        ),
        (
            Step::answer(201, "{}"),
            Kind::Unexpected {
                status: 201,
                code: None,
                message: "the payment in a 201 did not parse: data did not match any variant of untagged enum Rendered".into(),
            },
        ),
    ];
    for (step, expected) in cases {
        let api = FakeApi::start([step, Step::answer(201, payment("pay_1", "order-1"))]).await;
        let error = send(&api, order()).await.unwrap_err();
        let received = api.received();
        assert_eq!(received.len(), 1, "{expected:?} is final");
        assert_eq!(error.kind, expected);
        assert_eq!(error.attempts, 1);
        assert!(!error.is_indeterminate());
        assert_eq!(
            Some(error.idempotency_key.as_str()),
            received[0].idempotency_key.as_deref(),
            "the key is on every outcome"
        );
    }
}

#[tokio::test]
async fn a_duplicate_reference_without_a_payment_id_is_unexpected_not_guessed() {
    let api = FakeApi::start([Step::error(409, "DUPLICATE_MERCHANT_REFERENCE")]).await;
    let error = send(&api, order()).await.unwrap_err();
    assert!(
        matches!(error.kind, Kind::Unexpected { status: 409, .. }),
        "{error}"
    );
}

#[tokio::test]
async fn get_payment_reads_one_payment_and_tells_a_missing_one_apart() {
    let api = FakeApi::start([
        Step::error(503, "SERVICE_UNAVAILABLE"),
        Step::answer(200, payment("pay_1", "order-1")),
    ])
    .await;
    let client = fast(&api.url).build().unwrap();
    let payment = client.get_payment("pay_1").await.unwrap();
    assert_eq!(payment.id, "pay_1");
    assert_eq!(payment.status, PaymentStatus::Succeeded);
    assert_eq!(payment.amount.minor_units, Some(1000));
    let received = api.received();
    assert_eq!(received.len(), 2, "a read is retried too");
    for r in &received {
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("GET", "/payments/pay_1")
        );
        assert_eq!(r.idempotency_key, None);
    }

    api.then([Step::error(404, "PAYMENT_NOT_FOUND")]);
    assert_eq!(
        client.get_payment("pay_2").await,
        Err(GetPaymentError::NotFound)
    );
    api.then([Step::error(404, "NOT_FOUND")]);
    assert!(matches!(
        client.get_payment("pay_2").await,
        Err(GetPaymentError::Unexpected { status: 404, .. })
    ));
}

#[tokio::test]
async fn a_base_url_with_a_path_keeps_it() {
    let api = FakeApi::start([Step::answer(201, payment("pay_1", "order-1"))]).await;
    let client = fast(&format!("{}/api/v1", api.url)).build().unwrap();
    let key = IdempotencyKey::parse(b"k-1").unwrap();
    client
        .create_payment(order().idempotency_key(key))
        .await
        .unwrap();
    client.get_payment("pay_1").await.unwrap_err();
    let paths: Vec<_> = api.received().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/api/v1/payments", "/api/v1/payments/pay_1"]);
}
