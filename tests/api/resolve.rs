//! The operator's resolve workflow as a function (`engine::resolve`),
//! called without HTTP, on every backend. The HTTP face and the `once
//! records` client are covered in `provider.rs`.

use std::time::Duration;

use once_node::domain::{IdempotencyKey, Money, PaymentId, PrincipalId, TenantId};
use once_node::engine::execute::OPERATION;
use once_node::engine::resolve::{ResolveError, Verdict, resolve_unknown};
use once_node::idempotency::{Fingerprint, Record, Scope, Status};
use once_node::payments::command::Channel;
use once_node::payments::model::{NewPayment, PaymentStatus};
use once_node::store::{Claim, ClaimOutcome, ResolvedOutcome};

use crate::helpers::{Backend, TestApp, TestDb};
use crate::on_every_backend;

on_every_backend!(
    verdicts_finish_the_operation_with_an_audit_entry,
    resolve_refuses_what_it_cannot_account_for,
);

fn scope(key: &str) -> Scope {
    Scope {
        tenant: TenantId::parse("acme").unwrap(),
        principal: PrincipalId::parse("checkout").unwrap(),
        operation: OPERATION,
        key: IdempotencyKey::parse(key.as_bytes()).unwrap(),
    }
}

fn verdict(outcome: ResolvedOutcome) -> Verdict {
    Verdict::new(outcome, "checked with the provider".into(), "alice".into()).unwrap()
}

/// Claims `key` straight on the store, as a request would.
async fn claim(app: &TestApp, key: &str, reference: &str) -> ClaimOutcome {
    let state = &app.state;
    let scope = scope(key);
    let claim = Claim {
        payment: NewPayment {
            id: PaymentId::generate(),
            tenant: scope.tenant.clone(),
            account_id: "acc_1".into(),
            merchant_reference: reference.into(),
            amount: Money::from_minor(900, "EUR").unwrap(),
            channel: Channel::Web,
            region: state.config.region.clone(),
        },
        scope,
        fingerprint: Fingerprint {
            version: 1,
            hash: "f".repeat(64),
        },
        now: state.clock.now(),
        lease: state.config.lease,
        trace_id: None,
        region: state.config.region.clone(),
        response_schema: state.config.response_schema,
    };
    state.store.requests.claim(&claim).await.expect("claim")
}

/// A record whose provider outcome stayed unknown.
async fn left_unknown(app: &TestApp, owner: &Record) -> Record {
    let now = app.state.clock.now();
    app.state
        .store
        .requests
        .mark_unknown(owner, now, now.plus(Duration::from_secs(3600)))
        .await
        .expect("mark unknown");
    app.state
        .store
        .requests
        .load(&owner.scope)
        .await
        .unwrap()
        .expect("record")
}

async fn claimed_unknown(app: &TestApp, key: &str, reference: &str) -> Record {
    match claim(app, key, reference).await {
        ClaimOutcome::Claimed(owned) => left_unknown(app, &owned.record).await,
        other => panic!("expected a claim, got {other:?}"),
    }
}

async fn verdicts_finish_the_operation_with_an_audit_entry(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let charged = claimed_unknown(&app, "k-res-charged", "res-1").await;
    let not_charged = claimed_unknown(&app, "k-res-not-charged", "res-2").await;
    assert_eq!(charged.status, Status::UnknownRequiresRecovery);

    let after = resolve_unknown(
        &app.state,
        &charged.scope,
        verdict(ResolvedOutcome::Charged),
    )
    .await
    .expect("resolved as charged");
    assert_eq!(after.status, Status::Completed);
    assert_eq!(after.fence, charged.fence + 1, "taken over once");
    assert_eq!(after.response.as_ref().map(|r| r.status), Some(201));
    let id = charged.payment_id.clone().expect("payment id");
    let payment = app
        .state
        .store
        .payments
        .payment(&charged.scope.tenant, &id)
        .await
        .unwrap()
        .expect("payment");
    assert_eq!(payment.status, PaymentStatus::Succeeded);
    assert!(
        payment
            .provider_charge_id
            .as_deref()
            .is_some_and(|c| c.starts_with("manual:provider_payment_")),
        "{:?}",
        payment.provider_charge_id
    );
    let outbox = format!("SELECT COUNT(*) FROM outbox WHERE aggregate_id = '{id}'");
    assert_eq!(db.count(&outbox).await, 1, "one event for the payment");

    let after = resolve_unknown(
        &app.state,
        &not_charged.scope,
        verdict(ResolvedOutcome::NotCharged),
    )
    .await
    .expect("resolved as not charged");
    assert_eq!(after.status, Status::FailedRetryable);
    assert_eq!(after.error_code.as_deref(), Some("RESOLVED_NOT_CHARGED"));
    let id = not_charged.payment_id.clone().expect("payment id");
    let payment = app
        .state
        .store
        .payments
        .payment(&not_charged.scope.tenant, &id)
        .await
        .unwrap()
        .expect("payment");
    assert_eq!(
        payment.status,
        PaymentStatus::Pending,
        "nothing was charged"
    );
    let outbox = format!("SELECT COUNT(*) FROM outbox WHERE aggregate_id = '{id}'");
    assert_eq!(db.count(&outbox).await, 0, "no event without a charge");

    assert_eq!(
        db.count("SELECT COUNT(*) FROM record_resolutions WHERE actor = 'alice' AND reason = 'checked with the provider'")
            .await,
        2
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM record_resolutions WHERE outcome = 'charged'")
            .await,
        1
    );

    // A finished record awaits nothing.
    let again = resolve_unknown(
        &app.state,
        &charged.scope,
        verdict(ResolvedOutcome::NotCharged),
    )
    .await;
    assert!(
        matches!(again, Err(ResolveError::NotAwaiting(Status::Completed))),
        "{again:?}"
    );
    app.stop().await;
}

async fn resolve_refuses_what_it_cannot_account_for(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;

    for (reason, actor) in [("", "alice"), ("why", " "), ("  ", "")] {
        let refused = Verdict::new(ResolvedOutcome::Charged, reason.into(), actor.into());
        assert!(
            matches!(refused, Err(ResolveError::MissingAudit)),
            "{refused:?}"
        );
    }

    let missing = resolve_unknown(
        &app.state,
        &scope("k-res-nobody"),
        verdict(ResolvedOutcome::Charged),
    )
    .await;
    assert!(
        matches!(missing, Err(ResolveError::NotFound)),
        "{missing:?}"
    );

    // Still running under a live lease: not the operator's to decide.
    let ClaimOutcome::Claimed(running) = claim(&app, "k-res-running", "res-3").await else {
        panic!("expected a claim");
    };
    let refused = resolve_unknown(
        &app.state,
        &running.record.scope,
        verdict(ResolvedOutcome::NotCharged),
    )
    .await;
    assert!(
        matches!(refused, Err(ResolveError::NotAwaiting(Status::InProgress))),
        "{refused:?}"
    );

    // Stuck, then held by a recovery pass: busy for the lease, not refused.
    let stuck = claimed_unknown(&app, "k-res-recovering", "res-recovering").await;
    let now = app.state.clock.now();
    let held = app
        .state
        .store
        .recovery
        .take_over(&stuck, now, app.state.config.lease)
        .await
        .unwrap()
        .expect("the recovery pass takes the stuck record")
        .record;
    assert_eq!(held.status, Status::InProgress);
    let busy = resolve_unknown(&app.state, &held.scope, verdict(ResolvedOutcome::Charged)).await;
    assert!(matches!(busy, Err(ResolveError::Busy { .. })), "{busy:?}");

    // An operation that lost its merchant reference never made a payment.
    let taken = match claim(&app, "k-res-duplicate", "res-3").await {
        ClaimOutcome::BusinessKeyTaken { record, .. } => record,
        other => panic!("expected the business key taken, got {other:?}"),
    };
    let taken = left_unknown(&app, &taken).await;
    let refused =
        resolve_unknown(&app.state, &taken.scope, verdict(ResolvedOutcome::Charged)).await;
    assert!(
        matches!(refused, Err(ResolveError::NoPayment)),
        "{refused:?}"
    );

    assert_eq!(
        db.count("SELECT COUNT(*) FROM record_resolutions").await,
        0,
        "a refused verdict leaves no audit entry"
    );
    app.stop().await;
}
