//! The `sql` mode's group commit (decision 0037): the writes of concurrent
//! requests commit together, yet each succeeds or fails alone, and a crash
//! between a batch's commit and its answers loses nothing acknowledged and
//! doubles nothing. (Every other scenario of the suite runs with batching on:
//! it is how the `sql` mode writes.)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use once_node::data_keys::DataKeys;
use once_node::idempotency::{Record, Step};
use once_node::sql::SqlStore;
use once_node::sql::group_commit::BatchStats;
use once_node::store::{ClaimOutcome, RequestPath, StoreError};

use crate::contract::acme_claim;
use crate::helpers::*;
use crate::on_sql_backends;

on_sql_backends!(
    a_write_that_fails_fails_alone_while_the_rest_of_its_batch_commits,
    a_crash_between_a_batchs_commit_and_its_answers_loses_nothing_acknowledged,
);

/// The jobs of one batch, in the order they were queued.
enum Write {
    Claim(&'static str, &'static str),
    StaleStep,
    StaleFinish,
}

async fn a_write_that_fails_fails_alone_while_the_rest_of_its_batch_commits(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    // A paid order: its merchant reference (business key) is taken.
    let taken = send(app.post(
        ACME_KEY,
        Some("k-paid"),
        &payment_body("acc_1", "7.00", "order-taken"),
    ))
    .await;
    assert_eq!(taken.status, 201);
    let keys = Arc::new(DataKeys::from_file(test_data_keys()).unwrap());
    let store = SqlStore::new(db.pool().await, keys);
    // A record whose owner has since lost its fence.
    let owned = crate::contract::claim_as_another_owner(
        &app,
        "k-owned",
        &payment_body("acc_1", "1.00", "order-owned"),
    )
    .await;
    let stale = Record {
        fence: owned.fence + 1,
        ..owned.clone()
    };

    let writes = [
        Write::Claim("k-1", "order-1"),
        Write::StaleStep,
        Write::Claim("k-2", "order-2"),
        Write::Claim("k-dup", "order-taken"),
        Write::StaleFinish,
        Write::Claim("k-3", "order-3"),
    ];
    // On PostgreSQL the claims are gathered into one job (one statement),
    // and the finish into another (decision 0068); on SQLite every write is
    // a job of its own.
    let gathering = store.gather_stats();
    let (jobs, gathered) = match gathering {
        Some(_) => (3, 5),
        None => (writes.len(), 0),
    };
    let before = store.batches().stats();
    let held = store.batches().hold().await;
    let running = writes.iter().map(|w| run(&app, &store, &stale, w));
    let results = futures::future::join(join_all(running), async {
        // The writes queue behind the held batch (a writer holds its first
        // job while it waits to fill it); then let it go.
        eventually(Duration::from_secs(10), || async {
            (store.batches().queued() >= jobs - 1 && store.gathered_waiting() == gathered)
                .then_some(())
        })
        .await;
        drop(held);
    })
    .await
    .0;
    assert_eq!(
        store.batches().stats(),
        BatchStats {
            batches: before.batches + 1,
            jobs: before.jobs + jobs as u64,
        },
        "one batch held every write"
    );
    if let (Some((claims, finishes)), Some(before)) = (store.gather_stats(), gathering) {
        assert_eq!(
            (claims.jobs - before.0.jobs, claims.rows - before.0.rows),
            (1, 4),
            "the four claims were one statement"
        );
        assert_eq!(
            (finishes.jobs - before.1.jobs, finishes.rows - before.1.rows),
            (1, 1)
        );
    }

    let by_key: HashMap<_, _> = results.into_iter().collect();
    for key in ["k-1", "k-2", "k-3"] {
        assert!(
            matches!(&by_key[key], Ok(Some(ClaimOutcome::Claimed(_)))),
            "{key}: {:?}",
            by_key[key]
        );
    }
    assert!(
        matches!(
            &by_key["k-dup"],
            Ok(Some(ClaimOutcome::BusinessKeyTaken { .. }))
        ),
        "{:?}",
        by_key["k-dup"]
    );
    for stale_write in ["stale step", "stale finish"] {
        assert!(
            matches!(&by_key[stale_write], Err(StoreError::Fenced)),
            "{stale_write}: {:?}",
            by_key[stale_write]
        );
    }
    // What committed: three new payments beside the paid one, four records
    // beside the paid and the owned ones; the fenced record is as it was.
    assert_eq!(db.count("SELECT COUNT(*) FROM payments").await, 1 + 1 + 3);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM idempotency_requests").await,
        2 + 4
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM idempotency_requests WHERE idempotency_key = 'k-dup' AND payment_id IS NULL")
            .await,
        1,
        "the claim whose business key was taken keeps no payment"
    );
    let unchanged = app
        .state
        .store
        .requests
        .load(&owned.scope)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (unchanged.status, unchanged.step, unchanged.fence),
        (owned.status, owned.step, owned.fence)
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox").await,
        1,
        "only the paid order's event"
    );
    app.stop().await;
}

/// Runs one write on `store`; its label and result.
async fn run(
    app: &TestApp,
    store: &SqlStore,
    stale: &Record,
    write: &Write,
) -> (&'static str, Result<Option<ClaimOutcome>, StoreError>) {
    match write {
        Write::Claim(key, reference) => {
            let claim = acme_claim(app, key, &payment_body("acc_1", "2.00", reference));
            (key, store.claim(&claim).await.map(Some))
        }
        Write::StaleStep => (
            "stale step",
            store
                .advance(stale, Step::ProviderRequestSent, app.clock_now())
                .await
                .map(|()| None),
        ),
        Write::StaleFinish => {
            let now = app.clock_now();
            let finish = forged_finish(now);
            (
                "stale finish",
                store.finish(stale, &finish).await.map(|()| None),
            )
        }
    }
}

async fn a_crash_between_a_batchs_commit_and_its_answers_loses_nothing_acknowledged(
    backend: Backend,
) {
    const ACKNOWLEDGED: usize = 4;
    const IN_FLIGHT: usize = 20;
    let db = TestDb::new(backend).await;
    let client = reqwest::Client::new();
    let sim = ProviderSim::start().await;
    let node_args = sim.crash_node_args();
    let bodies: Vec<(String, String)> = (0..ACKNOWLEDGED + IN_FLIGHT)
        .map(|i| {
            let body = payment_body("acc_1", "3.00", &format!("order-batch-{i}"));
            (format!("k-batch-{i}"), body)
        })
        .collect();
    let (first, rest) = bodies.split_at(ACKNOWLEDGED);
    // One request at a time, each payment is two batches (its claim, its
    // finish). The first requests' batches commit and answer; the second
    // batch of the concurrent ones commits, and the process dies before
    // answering it.
    // (The API role alone: the event path's consumers commit batches too,
    // and the crash point counts every batch of the process.)
    let failpoint = format!("after_batch_commit={}*off->return", 2 * ACKNOWLEDGED + 1);
    let doomed_args = [&node_args[..], &["--role", "api"]].concat();
    let mut doomed =
        NodeProcess::start(&db, &doomed_args, &[("FAILPOINTS", failpoint.as_str())]).await;
    let mut acknowledged = HashMap::new();
    for (key, body) in first {
        let answer = send(post(&client, &doomed.url, ACME_KEY, Some(key), body)).await;
        assert_eq!(answer.status, 201, "{key}");
        acknowledged.insert(key.clone(), answer.body);
    }
    let lost = join_all(
        rest.iter()
            .map(|(key, body)| post(&client, &doomed.url, ACME_KEY, Some(key), body).send()),
    )
    .await;
    let status = doomed.wait_for_exit().await;
    assert!(!status.success(), "aborted after a batch's commit");
    assert!(
        lost.iter().all(|answer| answer.is_err()),
        "no answer came from the batches the process died in"
    );

    let node = NodeProcess::start(&db, &node_args, &[]).await;
    for (key, body) in &bodies {
        let answer = eventually(Duration::from_secs(20), || {
            let request = post(&client, &node.url, ACME_KEY, Some(key), body);
            async move {
                let answer = send(request).await;
                (answer.status != 409).then_some(answer)
            }
        })
        .await;
        let text = String::from_utf8_lossy(&answer.body);
        assert_eq!(answer.status, 201, "{key}: {text}");
        if let Some(first) = acknowledged.get(key) {
            assert!(answer.replayed, "{key} was acknowledged: it is replayed");
            assert_eq!(
                &answer.body, first,
                "{key}: the acknowledged answer, byte for byte"
            );
        }
    }
    let payments = bodies.len() as i64;
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments").await,
        payments,
        "one payment per key"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments WHERE status = 'succeeded'")
            .await,
        payments
    );
    assert_eq!(sim.ledger().await.len(), bodies.len(), "one charge per key");
    node.kill().await;
}
