//! The group commit's savepoints on SQLite (decision 0037, one-trip jobs):
//! a job that fails is undone alone, and a one-trip job that never runs the
//! savepoint move it was handed fails its whole batch instead of undoing a
//! neighbour's write. Whatever happens, every caller is told the truth: a
//! write answered `Ok` committed, one answered with an error did not.

use std::time::Duration;

use futures::future::{BoxFuture, join_all};
use once_db::group_commit::OneTripJob;
use once_db::{BatchFailed, Database};
use sqlx::{AnyConnection, Executor};

#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("refused")]
    Refused,
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    NotCommitted(#[from] BatchFailed),
}

/// One write of a test batch.
#[derive(Debug, Clone, Copy)]
enum Write {
    /// Inserts the row with the savepoint move at the head of its query.
    OneTrip(&'static str),
    /// Inserts the row, then fails: its insert must not commit.
    OneTripThenFail(&'static str),
    /// An ordinary job: the writer moves the savepoint for it.
    Ordinary(&'static str),
    /// A one-trip job that breaks its contract: fails without a query.
    FailsWithoutItsMove,
    /// A one-trip job that breaks its contract: succeeds without a query.
    SucceedsWithoutItsMove,
}

impl Write {
    fn row(self) -> Option<&'static str> {
        match self {
            Write::OneTrip(r) | Write::OneTripThenFail(r) | Write::Ordinary(r) => Some(r),
            Write::FailsWithoutItsMove | Write::SucceedsWithoutItsMove => None,
        }
    }
}

async fn insert(
    conn: &mut AnyConnection,
    savepoint_move: &'static str,
    row: &str,
) -> Result<(), WriteError> {
    let sql = format!("{savepoint_move}INSERT INTO written (row) VALUES ($1)");
    sqlx::query(&sql).bind(row).execute(conn).await?;
    Ok(())
}

async fn open() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::connect(dir.path().join("batches.db").to_str().unwrap(), 4)
        .await
        .unwrap();
    db.pool
        .execute("CREATE TABLE written (row TEXT PRIMARY KEY)")
        .await
        .unwrap();
    (dir, db)
}

/// Runs `writes` as one batch; each write's result, in order.
async fn one_batch(db: &Database, writes: &[Write]) -> Vec<Result<(), WriteError>> {
    let batches = db.batches();
    let before = batches.stats();
    let held = batches.hold().await;
    let running = writes.iter().map(|&write| async move {
        match write {
            Write::Ordinary(row) => {
                batches
                    .run::<(), WriteError>(Box::new(move |conn| {
                        Box::pin(insert(conn, "", row)) as BoxFuture<'_, _>
                    }))
                    .await
            }
            one_trip => batches.run_one_trip(job(one_trip)).await,
        }
    });
    let results = futures::future::join(join_all(running), async {
        for _ in 0..1000 {
            if batches.queued() >= writes.len() - 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(held);
    })
    .await
    .0;
    let after = batches.stats();
    assert_eq!(
        after.batches,
        before.batches + 1,
        "one batch held every write"
    );
    results
}

fn job(write: Write) -> OneTripJob<(), WriteError> {
    Box::new(move |conn, savepoint_move| {
        Box::pin(async move {
            match write {
                Write::OneTrip(row) => insert(conn, savepoint_move, row).await,
                Write::OneTripThenFail(row) => {
                    insert(conn, savepoint_move, row).await?;
                    Err(WriteError::Refused)
                }
                Write::FailsWithoutItsMove => Err(WriteError::Refused),
                Write::SucceedsWithoutItsMove => Ok(()),
                Write::Ordinary(_) => unreachable!("ordinary jobs run through `run`"),
            }
        })
    })
}

async fn rows(db: &Database) -> Vec<String> {
    sqlx::query_scalar("SELECT row FROM written ORDER BY row")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

/// What each caller was told matches what committed.
async fn assert_told_the_truth(
    db: &Database,
    writes: &[Write],
    results: &[Result<(), WriteError>],
) {
    let committed = rows(db).await;
    for (write, result) in writes.iter().zip(results) {
        if let Some(row) = write.row() {
            assert_eq!(
                result.is_ok(),
                committed.iter().any(|r| r == row),
                "{write:?} answered {result:?}, committed rows {committed:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_failed_job_is_undone_alone_whatever_kind_its_neighbours_are() {
    let (_dir, db) = open().await;
    let writes = [
        Write::OneTrip("a"),
        Write::OneTripThenFail("b"),
        Write::Ordinary("c"),
        Write::OneTrip("d"),
        Write::OneTripThenFail("e"),
        Write::OneTripThenFail("f"),
        Write::Ordinary("g"),
        Write::OneTrip("h"),
    ];
    let results = one_batch(&db, &writes).await;
    assert_eq!(rows(&db).await, ["a", "c", "d", "g", "h"]);
    assert_told_the_truth(&db, &writes, &results).await;
    assert!(
        matches!(results[1], Err(WriteError::Refused)),
        "{results:?}"
    );
}

#[tokio::test]
async fn a_one_trip_job_that_fails_without_its_savepoint_move_fails_the_batch_instead_of_undoing_a_neighbour()
 {
    let (_dir, db) = open().await;
    // The third job's savepoint would be `s2`, which never exists: rolling
    // back to `s1` instead would undo "b", already held as a success.
    let writes = [
        Write::OneTrip("a"),
        Write::OneTrip("b"),
        Write::FailsWithoutItsMove,
        Write::OneTrip("d"),
    ];
    let results = one_batch(&db, &writes).await;
    assert_eq!(rows(&db).await, Vec::<String>::new());
    assert_told_the_truth(&db, &writes, &results).await;
    assert!(
        results.iter().all(Result::is_err),
        "the whole batch failed: {results:?}"
    );
}

#[tokio::test]
async fn a_one_trip_job_that_succeeds_without_its_savepoint_move_fails_the_batch() {
    let (_dir, db) = open().await;
    // The next job releases `s1`, which never existed: it fails, and its
    // rollback to `s2` fails too, so nothing commits and no one hears `Ok`.
    for next in [
        Write::OneTripThenFail("c"),
        Write::Ordinary("c"),
        Write::OneTrip("c"),
    ] {
        let writes = [Write::OneTrip("a"), Write::SucceedsWithoutItsMove, next];
        let results = one_batch(&db, &writes).await;
        assert_eq!(rows(&db).await, Vec::<String>::new(), "next: {next:?}");
        assert_told_the_truth(&db, &writes, &results).await;
        assert!(results.iter().all(Result::is_err), "{results:?}");
    }
}
