//! I7: callers never see each other's keys, records or payments.

use crate::helpers::*;
use crate::on_every_backend;

on_every_backend!(tenants_and_principals_never_share_keys_or_payments);

async fn tenants_and_principals_never_share_keys_or_payments(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let body = payment_body("acc_1", "10.00", "order-shared");
    let acme = send(app.post(ACME_KEY, Some("shared-key"), &body)).await;
    assert_eq!(acme.status, 201);

    // Tenant B, same key and body: its own operation and its own payment.
    let globex = send(app.post(GLOBEX_KEY, Some("shared-key"), &body)).await;
    assert_eq!((globex.status, globex.replayed), (201, false));
    assert_ne!(globex.json()["id"], acme.json()["id"]);

    // Tenant B cannot read A's payment: 404, not 403.
    let acme_id = acme.json()["id"].as_str().unwrap().to_owned();
    let peek = app
        .client
        .get(format!("{}/payments/{acme_id}", app.url))
        .bearer_auth(GLOBEX_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(peek.status(), 404);
    let peek = Answer::of(peek).await;
    assert_eq!(peek.error_code(), "PAYMENT_NOT_FOUND");
    let own = app
        .client
        .get(format!("{}/payments/{acme_id}", app.url))
        .bearer_auth(ACME_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), 200);

    // Another principal of tenant A using the same key gets no replay of the
    // first principal's answer, and no key conflict that would reveal it;
    // the tenant's business key still stops a second payment.
    let other_principal = send(app.post(ACME_REFUNDS_KEY, Some("shared-key"), &body)).await;
    assert_eq!(
        (
            other_principal.status,
            other_principal.error_code().as_str(),
            other_principal.replayed
        ),
        (409, "DUPLICATE_MERCHANT_REFERENCE", false),
        "{}",
        String::from_utf8_lossy(&other_principal.body)
    );
    // The payment holding the business key is the tenant's own.
    assert_eq!(other_principal.json()["paymentId"], acme_id.as_str());
    let different = send(app.post(
        ACME_REFUNDS_KEY,
        Some("shared-key-2"),
        &payment_body("acc_1", "1.00", "order-refunds"),
    ))
    .await;
    assert_eq!(different.status, 201);
    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 3);
    assert_eq!(app.provider.approved_charges(), 3, "one charge per payment");
    app.stop().await;
}
