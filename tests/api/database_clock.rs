//! The `sql` mode on PostgreSQL keeps the database's time, not the node's
//! (decision 0035): a node whose clock is two hours ahead (libfaketime),
//! sharing the regional database with nodes on the true time, expires
//! nothing early, takes over nothing early, and stamps true times.

use std::time::{Duration, SystemTime};

use crate::helpers::{
    ACME_KEY, Backend, NodeProcess, ProviderSim, TestDb, eventually, payment_body, post, send,
};
use crate::raft_store::{LIBFAKETIME, faketime_available, real_now};

#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_two_hours_ahead_on_postgres_expires_and_takes_over_nothing_early() {
    if !faketime_available() {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    let sim = ProviderSim::start().await;
    // A one-hour window: by a clock two hours ahead, every answer made now
    // has already expired.
    let args = [
        "--lease",
        "15s",
        "--replay-window",
        "1h",
        "--recovery-interval",
        "100ms",
        "--provider-url",
        &sim.url,
    ];
    let client = reqwest::Client::new();

    // On the true time: one payment finished, one charged by a node that
    // then died holding its lease.
    let on_time = NodeProcess::start(&db, &args, &[]).await;
    let done = payment_body("acc_1", "10.00", "order-done");
    let made = send(post(&client, &on_time.url, ACME_KEY, Some("k-done"), &done)).await;
    assert_eq!(made.status, 201, "{}", String::from_utf8_lossy(&made.body));
    on_time.terminate().await;
    let mut dying = NodeProcess::start(
        &db,
        &args,
        &[("FAILPOINTS", "after_provider_charge=return")],
    )
    .await;
    let orphan = payment_body("acc_1", "20.00", "order-orphan");
    dying
        .dies_answering(
            post(&client, &dying.url, ACME_KEY, Some("k-orphan"), &orphan),
            "the node",
        )
        .await;
    assert_eq!(sim.ledger().await.len(), 2);

    let ahead = NodeProcess::start(
        &db,
        &args,
        &[
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME", "+2h"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    )
    .await;
    let readyz = client
        .get(format!("{}/readyz", ahead.url))
        .send()
        .await
        .unwrap();
    let date = httpdate::parse_http_date(readyz.headers()["date"].to_str().unwrap()).unwrap();
    let skew = date.duration_since(SystemTime::now()).unwrap_or_default();
    assert!(
        skew > Duration::from_secs(7000),
        "the node's own clock is two hours ahead ({skew:?})"
    );

    // Not expired: the stored answer replays, no second charge.
    let replay = send(post(&client, &ahead.url, ACME_KEY, Some("k-done"), &done)).await;
    assert_eq!(
        replay.status,
        201,
        "{}",
        String::from_utf8_lossy(&replay.body)
    );
    assert!(replay.replayed, "the answer made a minute ago replays");
    assert_eq!(made.body, replay.body);

    // Not taken over: the dead node's lease still runs by the database.
    let busy = send(post(
        &client,
        &ahead.url,
        ACME_KEY,
        Some("k-orphan"),
        &orphan,
    ))
    .await;
    assert_eq!(busy.status, 409, "{}", String::from_utf8_lossy(&busy.body));
    assert_eq!(busy.error_code(), "IDEMPOTENCY_REQUEST_IN_PROGRESS");

    // Its own new record carries the true time and a window of one hour
    // from it.
    let before = real_now();
    let new = payment_body("acc_1", "30.00", "order-new");
    let fresh = send(post(&client, &ahead.url, ACME_KEY, Some("k-new"), &new)).await;
    assert_eq!(
        fresh.status,
        201,
        "{}",
        String::from_utf8_lossy(&fresh.body)
    );
    let after = real_now();
    let stamped = db
        .count(&format!(
            "SELECT COUNT(*) FROM idempotency_requests WHERE idempotency_key = 'k-new' \
             AND created_at BETWEEN {} AND {} AND expires_at BETWEEN {} AND {}",
            before - 5_000,
            after + 5_000,
            before - 5_000 + 3_600_000,
            after + 5_000 + 3_600_000,
        ))
        .await;
    assert_eq!(stamped, 1, "the record's times are the database's");

    // Once the lease has run out by the database's clock, the recovery
    // worker finishes the orphan: by lookup, without charging again.
    eventually(Duration::from_secs(60), || async {
        (db.count("SELECT COUNT(*) FROM payments WHERE status = 'succeeded'")
            .await
            == 3)
            .then_some(())
    })
    .await;
    assert_eq!(sim.ledger().await.len(), 3, "one charge per payment");
    ahead.terminate().await;
}
