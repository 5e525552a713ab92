//! The raft mode's finish is two writes (the record in raft-store, then the
//! row and its event in the regional database), and the settling pass
//! writes the second one again for rows a crash left behind (decision
//! 0053). Applying it twice must write one event, and a finish that
//! disagrees with the row's final state is reported, never applied. The
//! crash itself, with real processes: `crash::crash_between_the_record_and_the_row`.

use once_node::domain::{PaymentId, UnixMillis};
use once_node::idempotency::{Record, Status, StoredResponse};
use once_node::payments::model::{OutboxEvent, PaymentStatus, PaymentUpdate};
use once_node::store::{Finish, StoreError, Unsettled};

use crate::contract::claim_as_another_owner;
use crate::helpers::*;
use crate::on_backends;

on_backends!([raft] settling_a_row_twice_writes_one_event);

fn finish(owner: &Record, status: PaymentStatus, now: UnixMillis) -> Finish {
    let id = owner.payment_id.clone().expect("a claim with a payment");
    Finish {
        status: match status {
            PaymentStatus::Succeeded => Status::Completed,
            _ => Status::FailedReplayable,
        },
        response: StoredResponse {
            status: 201,
            headers: vec![],
            body: b"{}".to_vec(),
            schema_version: 2,
        },
        payment: Some(PaymentUpdate {
            id: id.clone(),
            status,
            provider_charge_id: Some("ch_settle".into()),
            decline_code: None,
        }),
        event: Some(OutboxEvent {
            // A fresh id per finish, as the engine mints them: only the
            // row's state can keep a second one out.
            event_id: format!("evt_{}", PaymentId::generate().as_str()),
            event_type: "payment.succeeded",
            schema_version: 1,
            aggregate_id: id.to_string(),
            tenant: owner.scope.tenant.clone(),
            payload: "{}".into(),
            traceparent: None,
        }),
        now,
        expires_at: now.plus(std::time::Duration::from_secs(3600)),
    }
}

async fn settling_a_row_twice_writes_one_event(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let owner = claim_as_another_owner(
        &app,
        "k-twice",
        &payment_body("acc_1", "3.00", "order-twice"),
    )
    .await;
    let succeeded = finish(&owner, PaymentStatus::Succeeded, app.clock_now());
    app.state
        .store
        .requests
        .finish(&owner, &succeeded)
        .await
        .expect("the finish");
    let events = "SELECT COUNT(*) FROM outbox";
    assert_eq!(db.count(events).await, 1);

    let id = owner.payment_id.clone().unwrap();
    let row = app
        .state
        .store
        .payments
        .payment(&owner.scope.tenant, &id)
        .await
        .unwrap()
        .expect("the row");
    assert_eq!(row.status, PaymentStatus::Succeeded);
    let unsettled = Unsettled {
        payment: row,
        record: Record {
            status: Status::Completed,
            ..owner.clone()
        },
    };
    // The settling pass renders its own finish, with an event of its own.
    let again = finish(&owner, PaymentStatus::Succeeded, app.clock_now());
    app.state
        .store
        .recovery
        .settle(&unsettled, &again)
        .await
        .expect("settling a settled row again changes nothing");
    assert_eq!(db.count(events).await, 1, "one event");

    let declined = finish(&owner, PaymentStatus::Declined, app.clock_now());
    let disagreement = app.state.store.recovery.settle(&unsettled, &declined).await;
    assert!(
        matches!(disagreement, Err(StoreError::Corrupt(_))),
        "{disagreement:?}"
    );
    assert_eq!(db.count(events).await, 1);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments WHERE status = 'succeeded' AND provider_charge_id = 'ch_settle'")
            .await,
        1
    );
}
