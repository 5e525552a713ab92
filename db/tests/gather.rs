//! Gathering (decision 0068): the writes that wait for the same batch are
//! one job and one statement, yet each is answered alone: its row refused
//! while the others commit, or every row told it did not commit when the
//! job fails as a whole. No write is left waiting, even when its job never
//! runs.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use once_db::gather::RunGathered;
use once_db::{Database, GatherStats, Gatherer};
use sqlx::{AnyConnection, Executor, Row};
use support::{WriteError, dialects, open};

/// Inserts every row it is given with one statement; a row that was there
/// is refused alone. A row named `poison` fails the job after the insert.
async fn insert_all(
    conn: &mut AnyConnection,
    savepoint_move: &'static str,
    rows: Vec<String>,
) -> Result<Vec<Result<(), WriteError>>, WriteError> {
    let from = match conn.backend_name() {
        "PostgreSQL" => "json_array_elements_text($1::json)",
        _ => "json_each($1)",
    };
    let sql = format!(
        "{savepoint_move}INSERT INTO written (row) SELECT value FROM {from} WHERE true \
         ON CONFLICT DO NOTHING RETURNING row"
    );
    let json = serde_json::to_string(&rows).unwrap();
    let inserted: Vec<String> = sqlx::query(&sql)
        .bind(json)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.get::<String, _>(0))
        .collect();
    if rows.iter().any(|r| r == "poison") {
        return Err(WriteError::AfterWrite);
    }
    Ok(rows
        .iter()
        .map(|r| {
            if inserted.contains(r) {
                Ok(())
            } else {
                Err(WriteError::Refused)
            }
        })
        .collect())
}

fn gatherer(db: &Database) -> Gatherer<String, (), WriteError> {
    let run: RunGathered<String, (), WriteError> = Arc::new(|conn, savepoint_move, rows| {
        Box::pin(async move { insert_all(conn, savepoint_move, rows).await })
    });
    Gatherer::new(db.batches().clone(), run)
}

async fn rows(db: &Database) -> Vec<String> {
    sqlx::query("SELECT row FROM written ORDER BY row")
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<String, _>(0))
        .collect()
}

/// Writes `rows` while the writers are held, so that they wait for one
/// batch together; each write's result, in order.
async fn held_together(
    db: &Database,
    gatherer: &Gatherer<String, (), WriteError>,
    rows: &[&str],
) -> Vec<Result<(), WriteError>> {
    let held = db.batches().hold().await;
    let writes = rows.iter().map(|row| gatherer.write((*row).to_owned()));
    let (results, ()) = futures::future::join(join_all(writes), async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while gatherer.waiting() < rows.len() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "writes never waited"
            );
            tokio::task::yield_now().await;
        }
        drop(held);
    })
    .await;
    results
}

#[tokio::test]
async fn writes_waiting_for_one_batch_are_one_statement_and_each_answered_alone() {
    for dialect in dialects() {
        let (_place, db) = open(dialect).await;
        db.pool
            .execute("INSERT INTO written (row) VALUES ('taken')")
            .await
            .unwrap();
        let gatherer = gatherer(&db);
        let results = held_together(&db, &gatherer, &["a", "taken", "b"]).await;
        assert!(results[0].is_ok(), "{dialect:?}: {:?}", results[0]);
        assert!(
            matches!(results[1], Err(WriteError::Refused)),
            "{dialect:?}: {:?}",
            results[1]
        );
        assert!(results[2].is_ok(), "{dialect:?}: {:?}", results[2]);
        assert_eq!(
            gatherer.stats(),
            GatherStats { jobs: 1, rows: 3 },
            "{dialect:?}: one job took the three"
        );
        assert_eq!(rows(&db).await, ["a", "b", "taken"], "{dialect:?}");
    }
}

#[tokio::test]
async fn a_job_that_fails_as_a_whole_commits_none_of_its_writes_and_says_so_to_each() {
    for dialect in dialects() {
        let (_place, db) = open(dialect).await;
        let gatherer = gatherer(&db);
        let results = held_together(&db, &gatherer, &["a", "poison", "b"]).await;
        for result in &results {
            assert!(
                matches!(result, Err(WriteError::NotCommitted(_))),
                "{dialect:?}: {result:?}"
            );
        }
        assert!(rows(&db).await.is_empty(), "{dialect:?}: nothing committed");
        // The next job commits as usual.
        gatherer.write("c".into()).await.unwrap();
        assert_eq!(rows(&db).await, ["c"], "{dialect:?}");
    }
}

#[tokio::test]
async fn every_one_of_many_concurrent_writes_is_answered_and_committed_once() {
    for dialect in dialects() {
        let (_place, db) = open(dialect).await;
        let gatherer = gatherer(&db);
        let writers = (0..200).map(|i| {
            let gatherer = gatherer.clone();
            tokio::spawn(async move { gatherer.write(format!("row-{i:03}")).await })
        });
        for result in join_all(writers).await {
            result.unwrap().unwrap();
        }
        assert_eq!(rows(&db).await.len(), 200, "{dialect:?}");
        let stats = gatherer.stats();
        assert_eq!(stats.rows, 200, "{dialect:?}: {stats:?}");
        assert_eq!(gatherer.waiting(), 0, "{dialect:?}");
    }
}

#[tokio::test]
async fn a_write_whose_job_never_runs_is_told_so() {
    for dialect in dialects() {
        let (_place, db) = open(dialect).await;
        let gatherer = gatherer(&db);
        db.pool.close().await;
        let answer = tokio::time::timeout(Duration::from_secs(10), gatherer.write("a".into()))
            .await
            .expect("answered, not left waiting");
        assert!(
            matches!(answer, Err(WriteError::NotCommitted(_))),
            "{dialect:?}: {answer:?}"
        );
        assert_eq!(gatherer.waiting(), 0, "{dialect:?}");
    }
}

#[tokio::test]
async fn a_job_that_loses_count_of_its_writes_commits_none_of_them() {
    for dialect in dialects() {
        let (_place, db) = open(dialect).await;
        let run: RunGathered<String, (), WriteError> = Arc::new(|conn, savepoint_move, rows| {
            Box::pin(async move {
                let mut outcomes = insert_all(conn, savepoint_move, rows).await?;
                outcomes.pop();
                Ok(outcomes)
            })
        });
        let gatherer = Gatherer::new(db.batches().clone(), run);
        let results = held_together(&db, &gatherer, &["a", "b"]).await;
        for result in &results {
            assert!(
                matches!(result, Err(WriteError::NotCommitted(_))),
                "{dialect:?}: {result:?}"
            );
        }
        assert!(rows(&db).await.is_empty(), "{dialect:?}: nothing committed");
    }
}
