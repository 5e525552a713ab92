//! `once node --role`: the API, the event path and recovery as separate
//! processes on one PostgreSQL database, as a deployment runs them. The API
//! process makes payments and leaves their events in the outbox; the events
//! process publishes and consumes them and answers no payments; a payment
//! whose API process died after charging is finished by the recovery
//! process (by lookup, no second charge), not by the API process.

use std::time::Duration;

use once_test_support::metrics::metric;

use crate::helpers::{
    ACME_KEY, Backend, NodeProcess, ProviderSim, TestDb, eventually, payment_body, post, send,
};

const WAIT: Duration = Duration::from_secs(60);

#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_events_and_recovery_run_as_separate_processes_on_one_database() {
    let db = TestDb::new(Backend::Postgres).await;
    let sim = ProviderSim::start().await;
    let args = |role: &'static str| {
        vec![
            "--role".to_owned(),
            role.to_owned(),
            "--lease".to_owned(),
            "2s".to_owned(),
            // One charge with its three attempts must fit in the lease.
            "--provider-connect-timeout".to_owned(),
            "200ms".to_owned(),
            "--provider-timeout".to_owned(),
            "300ms".to_owned(),
            "--recovery-interval".to_owned(),
            "100ms".to_owned(),
            "--provider-url".to_owned(),
            sim.url.clone(),
        ]
    };
    let start = |role: &'static str, env: &'static [(&'static str, &'static str)]| {
        let args = args(role);
        let db = &db;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            NodeProcess::start(db, &args, env).await
        }
    };
    let client = reqwest::Client::new();

    let api = start("api", &[]).await;
    let first = payment_body("acc_1", "10.00", "order-1");
    let made = send(post(&client, &api.url, ACME_KEY, Some("k-1"), &first)).await;
    assert_eq!(made.status, 201, "{}", String::from_utf8_lossy(&made.body));
    let unpublished = "SELECT COUNT(*) FROM outbox WHERE published_at IS NULL";
    assert_eq!(
        db.count(unpublished).await,
        1,
        "no publisher in the API process"
    );

    let events = start("events", &[]).await;
    // The consumer can write the entry a moment before the publisher has
    // marked the row published: both, in either order.
    eventually(WAIT, || async {
        (db.count("SELECT COUNT(*) FROM ledger_entries").await == 1
            && db.count(unpublished).await == 0)
            .then_some(())
    })
    .await;
    let refused = send(post(&client, &events.url, ACME_KEY, Some("k-x"), &first)).await;
    assert_eq!(
        refused.status, 404,
        "the events process answers no payments"
    );
    let ready = client
        .get(format!("{}/readyz", events.url))
        .send()
        .await
        .unwrap();
    assert!(ready.status().is_success(), "its probes still answer");

    // An API process dies after charging, holding a 2 s lease.
    let mut dying = start("api", &[("FAILPOINTS", "after_provider_charge=return")]).await;
    let orphan = payment_body("acc_1", "20.00", "order-2");
    dying
        .dies_answering(
            post(&client, &dying.url, ACME_KEY, Some("k-2"), &orphan),
            "the API process",
        )
        .await;
    let recovery = start("recovery", &[]).await;
    eventually(WAIT, || async {
        (db.count("SELECT COUNT(*) FROM payments WHERE status = 'succeeded'")
            .await
            == 2)
            .then_some(())
    })
    .await;
    eventually(WAIT, || async {
        (db.count("SELECT COUNT(*) FROM ledger_entries").await == 2).then_some(())
    })
    .await;
    assert_eq!(sim.ledger().await.len(), 2, "one charge per payment");
    let takeovers = "idempotency_takeover_count_total";
    assert_eq!(metric(&client, &recovery.admin_url, takeovers).await, 1.0);
    assert_eq!(
        metric(&client, &api.admin_url, takeovers).await,
        0.0,
        "the API process recovers nothing"
    );
    assert_eq!(metric(&client, &events.admin_url, takeovers).await, 0.0);
    let replay = send(post(&client, &api.url, ACME_KEY, Some("k-2"), &orphan)).await;
    assert_eq!(
        replay.status,
        201,
        "{}",
        String::from_utf8_lossy(&replay.body)
    );
    assert!(replay.replayed);
}
