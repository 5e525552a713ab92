//! Crashes at every recovery point (a failpoint aborts the real process, as
//! abruptly as SIGKILL), then a restart and a retry: one payment, one charge
//! in the provider simulator's ledger (none before the restart when the
//! crash came before the charge was sent), and the client gets the original
//! 201. Needs the `failpoints` feature, which `.ci/run` turns on for the
//! test build.
#![cfg(feature = "failpoints")]

use std::time::Duration;

use crate::helpers::*;
use crate::{on_backends, on_every_backend};
use once_test_support::wait::until;

on_every_backend!(
    crash_after_claim,
    crash_after_provider_request_sent,
    crash_after_provider_charge,
    crash_after_finish,
);
on_backends!([raft] crash_between_the_record_and_the_row);

async fn crash_after_claim(backend: Backend) {
    crash_then_retry(backend, "after_claim").await
}
async fn crash_after_provider_request_sent(backend: Backend) {
    crash_then_retry(backend, "after_provider_request_sent").await
}
async fn crash_after_provider_charge(backend: Backend) {
    crash_then_retry(backend, "after_provider_charge").await
}
async fn crash_after_finish(backend: Backend) {
    crash_then_retry(backend, "after_finish").await
}

async fn crash_then_retry(backend: Backend, point: &str) {
    let db = TestDb::new(backend).await;
    let client = reqwest::Client::new();
    let body = payment_body("acc_1", "25.00", "order-crash");
    let failpoint = format!("{point}=return");

    let sim = ProviderSim::start().await;
    let node_args = sim.crash_node_args();
    let mut doomed =
        NodeProcess::start(&db, &node_args, &[("FAILPOINTS", failpoint.as_str())]).await;
    let lost = post(&client, &doomed.url, ACME_KEY, Some("k-crash"), &body)
        .send()
        .await;
    assert!(
        lost.is_err(),
        "the node died mid-request, the client saw no answer"
    );
    let status = doomed.wait_for_exit().await;
    assert!(!status.success(), "aborted at {point}");
    // Both earlier points abort before the charge is sent; both later ones
    // after the provider made it.
    let charged_before_the_crash = match point {
        "after_claim" | "after_provider_request_sent" => 0,
        "after_provider_charge" | "after_finish" => 1,
        other => panic!("unknown crash point {other}"),
    };
    let before_restart = sim.ledger().await;
    assert_eq!(
        before_restart.len(),
        charged_before_the_crash,
        "charges in the provider's ledger after a crash at {point}: {before_restart:?}"
    );

    let node = NodeProcess::start(&db, &node_args, &[]).await;
    // Retry like a client would: in-progress answers until the dead owner's
    // lease runs out; then the takeover (this retry's, or the recovery
    // worker's) finishes the payment.
    let answer = eventually(Duration::from_secs(20), || {
        let request = post(&client, &node.url, ACME_KEY, Some("k-crash"), &body);
        async move {
            let answer = send(request).await;
            match answer.status {
                409 => {
                    assert_eq!(answer.error_code(), "IDEMPOTENCY_REQUEST_IN_PROGRESS");
                    None
                }
                _ => Some(answer),
            }
        }
    })
    .await;
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    if point == "after_finish" {
        assert!(answer.replayed, "a finished record is replayed");
    }
    let again = send(post(&client, &node.url, ACME_KEY, Some("k-crash"), &body)).await;
    assert_eq!((again.status, again.replayed), (201, true));
    assert_eq!(again.body, answer.body);

    // The raft mode finishes the record in raft-store before it settles the
    // row: a retry can be answered from the record (by the recovery
    // worker's finish) a moment before the row shows it.
    until(
        "the payment's row is settled",
        Duration::from_secs(10),
        || async {
            db.count("SELECT COUNT(*) FROM payments WHERE status <> 'pending'")
                .await
                == 1
        },
    )
    .await;
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments").await,
        1,
        "one payment after a crash at {point}"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments WHERE status = 'succeeded'")
            .await,
        1
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox").await,
        1,
        "one event after a crash at {point}"
    );

    // One charge in the provider's ledger, under this payment's key, and it
    // is the charge the payment records (made before the crash when it was).
    let ledger = sim.ledger().await;
    assert_eq!(
        ledger.len(),
        1,
        "one charge after a crash at {point}: {ledger:?}"
    );
    let charge = &ledger[0];
    assert_eq!(charge.idempotency_key, provider_key_of(&answer));
    assert_eq!(charge.status, "succeeded");
    if let Some(first) = before_restart.first() {
        assert_eq!(charge.id, first.id, "the charge made before the crash");
    }
    assert_eq!(
        db.count(&format!(
            "SELECT COUNT(*) FROM payments WHERE provider_charge_id = '{}'",
            charge.id
        ))
        .await,
        1,
        "the payment records the provider's one charge"
    );
    node.kill().await;
}

/// The raft mode finishes a payment in two writes: the record in
/// raft-store, then the row and its event in the regional database. A crash
/// between the two leaves a final record, which every retry replays, behind
/// a pending row without its event. The recovery worker's settling pass
/// writes what the finish would have (decision 0053): the row succeeded with
/// the provider's one charge, and one event.
async fn crash_between_the_record_and_the_row(backend: Backend) {
    let db = TestDb::new(backend).await;
    let client = reqwest::Client::new();
    let body = payment_body("acc_1", "25.00", "order-settle");
    let sim = ProviderSim::start().await;
    let node_args = sim.crash_node_args();
    let mut doomed = NodeProcess::start(
        &db,
        &node_args,
        &[("FAILPOINTS", "after_record_finished=return")],
    )
    .await;
    let lost = post(&client, &doomed.url, ACME_KEY, Some("k-settle"), &body)
        .send()
        .await;
    assert!(lost.is_err(), "the node died between the two writes");
    assert!(!doomed.wait_for_exit().await.success());
    assert_eq!(
        db.count_records("COMPLETED").await,
        1,
        "the record is final"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments WHERE status = 'pending'")
            .await,
        1,
        "the row is still pending"
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM outbox").await, 0);

    let node = NodeProcess::start(&db, &node_args, &[]).await;
    let answer = send(post(&client, &node.url, ACME_KEY, Some("k-settle"), &body)).await;
    assert_eq!(
        (answer.status, answer.replayed),
        (201, true),
        "the retry replays the finished record at once: {}",
        String::from_utf8_lossy(&answer.body)
    );

    until(
        "the settling pass settles the row",
        Duration::from_secs(20),
        || async {
            db.count("SELECT COUNT(*) FROM payments WHERE status = 'succeeded'")
                .await
                == 1
        },
    )
    .await;
    let ledger = sim.ledger().await;
    assert_eq!(ledger.len(), 1, "one charge: {ledger:?}");
    assert_eq!(
        db.count(&format!(
            "SELECT COUNT(*) FROM payments WHERE provider_charge_id = '{}'",
            ledger[0].id
        ))
        .await,
        1,
        "the row records the provider's charge"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox WHERE event_type = 'payment.succeeded'")
            .await,
        1,
        "one event"
    );
    assert_eq!(
        metric(
            &client,
            &node.admin_url,
            "payments_settled_late_count_total"
        )
        .await,
        1.0
    );
    node.kill().await;
}
