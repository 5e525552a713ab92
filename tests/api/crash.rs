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
on_backends!(
    [postgres] a_recovery_stuck_on_a_locked_row_is_cut_off_at_the_drain_deadline
);
on_backends!(
    [raft] crash_between_the_record_and_the_row,
    killed_after_answering_before_the_finish,
    stopped_after_answering_it_writes_the_finish_before_it_exits
);

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
    // The raft mode answers before it writes the finish (decision 0054): a
    // crash after the finish may come after the answer went out, and that
    // answer is the one every retry must get.
    let seen = match lost {
        Err(_) => None,
        Ok(answer) if backend == Backend::Raft && point == "after_finish" => Some((
            answer.status().as_u16(),
            answer.bytes().await.map(|b| b.to_vec()).unwrap_or_default(),
        )),
        Ok(answer) => panic!(
            "the node died mid-request, yet the client got {}",
            answer.status()
        ),
    };
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
    let answer = answer_once_not_in_progress(Duration::from_secs(20), || {
        post(&client, &node.url, ACME_KEY, Some("k-crash"), &body)
    })
    .await;
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    // A charge the dead owner made is an earlier attempt's effect: its
    // answer is a replay (I2), whether or not the record was finished.
    // (Without one, the retry's own charge is fresh — unless the recovery
    // worker charged first, and then the retry replays its answer.)
    if charged_before_the_crash == 1 {
        assert!(
            answer.replayed,
            "the answer to a charge made before the crash at {point} is a replay"
        );
    }
    if let Some((status, body)) = seen {
        assert_eq!(
            (status, body),
            (answer.status, answer.body.clone()),
            "the answer given before the crash is the one replayed"
        );
    }
    let again = send(post(&client, &node.url, ACME_KEY, Some("k-crash"), &body)).await;
    assert_eq!((again.status, again.replayed), (201, true));
    assert_eq!(again.body, answer.body);

    // The raft mode finishes the record in raft-store before it settles the
    // row: a retry can be answered from the record (by the recovery
    // worker's finish) a moment before the row shows it.
    row_settled(&db, Duration::from_secs(10)).await;
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

/// A node stops within its drain deadline even when its recovery worker is
/// stuck: here on a row another session holds locked (a long transaction,
/// an operator's session), a wait with no end of its own. The record the
/// worker reached is taken over by the next node after its lease, and the
/// payment ends with one charge. Before the stop had one deadline, the node
/// waited for the worker forever and a supervisor or a pod's grace period
/// SIGKILLed it.
async fn a_recovery_stuck_on_a_locked_row_is_cut_off_at_the_drain_deadline(backend: Backend) {
    use sqlx::Connection;

    let run = OnePayment::new(backend, "k-stuck", "order-stuck").await;
    let db = &run.db;
    let mut doomed = run.node(&[], "after_claim=return").await;
    doomed
        .dies_answering(run.post(&doomed), "the node claiming the payment")
        .await;

    let mut operator = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let mut lock = operator.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM idempotency_requests FOR UPDATE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let stuck = run.node(&["--drain-timeout", "1s"], "").await;
    until(
        "the recovery worker waits on the locked row",
        Duration::from_secs(20),
        || async {
            db.count(
                "SELECT COUNT(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .await
                > 0
        },
    )
    .await;
    // `terminate` fails unless the exit comes within 20 s of SIGTERM.
    let status = stuck.terminate().await;
    assert!(status.success(), "a clean stop: {status:?}");
    lock.rollback().await.unwrap();

    let node = run.node(&[], "").await;
    let answer = answer_once_not_in_progress(Duration::from_secs(20), || run.post(&node)).await;
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    row_settled(db, Duration::from_secs(10)).await;
    let ledger = run.sim.ledger().await;
    assert_eq!(ledger.len(), 1, "one charge: {ledger:?}");
    assert_eq!(ledger[0].idempotency_key, provider_key_of(&answer));
    node.kill().await;
}

/// One payment, sent again and again under one key, and the node that
/// serves it crashing or stopping on the way: the scenarios of the raft
/// mode's answer and finish below.
struct OnePayment {
    db: TestDb,
    client: reqwest::Client,
    sim: ProviderSim,
    key: &'static str,
    body: String,
}

impl OnePayment {
    async fn new(backend: Backend, key: &'static str, reference: &str) -> Self {
        Self {
            db: TestDb::new(backend).await,
            client: reqwest::Client::new(),
            sim: ProviderSim::start().await,
            key,
            body: payment_body("acc_1", "25.00", reference),
        }
    }

    /// A node on the simulator with the crash tests' short lease, `extra`
    /// flags after those, `failpoints` armed (`""`: none).
    async fn node(&self, extra: &[&str], failpoints: &str) -> NodeProcess {
        self.node_in("test", extra, failpoints).await
    }

    /// As [`Self::node`], in `region`.
    async fn node_in(&self, region: &str, extra: &[&str], failpoints: &str) -> NodeProcess {
        let args: Vec<&str> = self
            .sim
            .crash_node_args()
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        let env: &[(&str, &str)] = if failpoints.is_empty() {
            &[]
        } else {
            &[("FAILPOINTS", failpoints)]
        };
        NodeProcess::start_in(region, &self.db.url, &self.db.node_args(), &args, env).await
    }

    fn post(&self, node: &NodeProcess) -> reqwest::RequestBuilder {
        post(
            &self.client,
            &node.url,
            ACME_KEY,
            Some(self.key),
            &self.body,
        )
    }

    async fn pay(&self, node: &NodeProcess) -> Answer {
        send(self.post(node)).await
    }
}

/// The raft mode finishes a payment in two writes: the record in
/// raft-store, then the row and its event in the regional database. A crash
/// between the two leaves a final record, which every retry replays, behind
/// a pending row without its event. The recovery worker's settling pass
/// writes what the finish would have (decision 0053): the row succeeded with
/// the provider's one charge, and one event.
async fn crash_between_the_record_and_the_row(backend: Backend) {
    let run = OnePayment::new(backend, "k-settle", "order-settle").await;
    let db = &run.db;
    let mut doomed = run.node(&[], "after_record_finished=return").await;
    // The answer goes out before the finish is written (decision 0054).
    let first = run.pay(&doomed).await;
    assert_eq!(first.status, 201);
    assert!(
        !doomed.wait_for_exit().await.success(),
        "the node died between the two writes"
    );
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

    let node = run.node(&[], "").await;
    let answer = run.pay(&node).await;
    assert_eq!(
        (answer.status, answer.replayed),
        (201, true),
        "the retry replays the finished record at once: {}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(answer.body, first.body);

    row_settled(db, Duration::from_secs(20)).await;
    let ledger = run.sim.ledger().await;
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
            &run.client,
            &node.admin_url,
            "payments_settled_late_count_total"
        )
        .await,
        1.0
    );
    node.kill().await;
}

/// The raft mode answers a payment once the provider has, and writes the
/// finish after (decision 0054). Killed after the answer went out and
/// before the finish was written, the node leaves the record owned at
/// `PROVIDER_REQUEST_SENT`; once its lease runs out the retry takes it
/// over, asks the provider by key, and answers the very bytes the client
/// already had — without a second charge.
async fn killed_after_answering_before_the_finish(backend: Backend) {
    let run = OnePayment::new(backend, "k-answered", "order-answered").await;
    let db = &run.db;
    let doomed = run.node(&[], "before_finish_after_answer=return").await;
    let first = run.pay(&doomed).await;
    assert_eq!(
        (first.status, first.replayed),
        (201, false),
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    // A retry on the same node replays from its memory at once.
    let again = run.pay(&doomed).await;
    assert_eq!((again.status, again.replayed), (201, true));
    assert_eq!(again.body, first.body);
    // And this node reads the payment back as answered, though its row is
    // still pending.
    let id = first.json()["id"].as_str().unwrap().to_owned();
    let read = send(
        run.client
            .get(format!("{}/payments/{id}", doomed.url))
            .bearer_auth(ACME_KEY),
    )
    .await;
    assert_eq!(read.status, 200);
    assert_eq!(read.json()["status"], "succeeded");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments WHERE status = 'pending'")
            .await,
        1
    );
    doomed.kill().await;
    assert_eq!(
        db.count_records("IN_PROGRESS").await,
        1,
        "the finish was never written"
    );

    // The node that recovers it is in another region and renders new
    // answers in another shape; this one keeps the region that took it and
    // the shape it was first answered in (RELIABILITY finding 12).
    let node = run
        .node_in("elsewhere", &["--response-schema", "1"], "")
        .await;
    let recovered = answer_once_not_in_progress(Duration::from_secs(20), || run.post(&node)).await;
    assert_eq!(
        (recovered.status, recovered.replayed),
        (201, true),
        "the charge was an earlier attempt's: the recovered answer is a replay (I2)"
    );
    assert_eq!(
        String::from_utf8_lossy(&recovered.body),
        String::from_utf8_lossy(&first.body),
        "the recovered answer is the one given before the kill, byte for byte"
    );
    let replay = run.pay(&node).await;
    assert_eq!((replay.status, replay.replayed), (201, true));
    assert_eq!(replay.body, first.body);
    let ledger = run.sim.ledger().await;
    assert_eq!(ledger.len(), 1, "one charge: {ledger:?}");
    row_settled(db, Duration::from_secs(10)).await;
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox").await,
        1,
        "one event"
    );
    // The recovering owner answered before its own finish too, and wrote it.
    let written = r#"payments_finishes_after_answer_total{result="written"}"#;
    until("its finish is counted", Duration::from_secs(10), || async {
        metric(&run.client, &node.admin_url, written).await == 1.0
    })
    .await;
    node.kill().await;
}

/// Waits until the scenario's one payment row is no longer pending: in the
/// raft mode it is settled after its record (decisions 0053 and 0054).
async fn row_settled(db: &TestDb, limit: Duration) {
    until("the payment's row is settled", limit, || async {
        db.count("SELECT COUNT(*) FROM payments WHERE status <> 'pending'")
            .await
            == 1
    })
    .await;
}

/// SIGTERM right after an answer whose finish is still being written (a
/// failpoint delays it by a second): the node drains its requests, then
/// waits for the finish before it exits, so the record, the row and the
/// event are all there when it is gone.
async fn stopped_after_answering_it_writes_the_finish_before_it_exits(backend: Backend) {
    let run = OnePayment::new(backend, "k-stopped", "order-stopped").await;
    let db = &run.db;
    let mut node = run
        .node(&[], "before_finish_after_answer=sleep(1000)")
        .await;
    let answer = run.pay(&node).await;
    assert_eq!(answer.status, 201);
    assert!(node.process.terminate().await.success(), "a clean stop");
    assert_eq!(
        db.count_records("COMPLETED").await,
        1,
        "the finish was written"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments WHERE status = 'succeeded'")
            .await,
        1
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM outbox").await, 1);
}
