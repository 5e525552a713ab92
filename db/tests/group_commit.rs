//! The group commit's savepoints (decision 0037, one-trip jobs 0044,
//! conditional jobs 0047): a job that fails is undone alone, except a
//! conditional job on PostgreSQL that failed other than by a refusal, which
//! takes the writes sharing its savepoint with it; and a one-trip job that
//! never runs the savepoint move it was handed (SQLite) fails its whole
//! batch instead of undoing a neighbour's write. Whatever happens, every
//! caller is told the truth: a write answered `Ok` committed, one answered
//! with an error did not.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, join_all};
use once_db::group_commit::{GroupCommit, OneTripJob};
use once_db::{Database, Dialect};
use once_test_support::services::postgres_available;
use sqlx::{AnyConnection, Executor};
use support::{Place, WriteError, dialects, open};
use tokio::sync::Barrier;

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
    /// A conditional job: inserts the row unless it exists, refused (having
    /// written nothing) if it did.
    Conditional(&'static str),
    /// A conditional job that inserts the row, then fails.
    ConditionalThenFail(&'static str),
    /// A conditional job whose statement the database refuses (inserting
    /// the row twice), which aborts a PostgreSQL transaction.
    ConditionalDatabaseError(&'static str),
}

impl Write {
    fn row(self) -> Option<&'static str> {
        match self {
            Write::OneTrip(r)
            | Write::OneTripThenFail(r)
            | Write::Ordinary(r)
            | Write::Conditional(r)
            | Write::ConditionalThenFail(r)
            | Write::ConditionalDatabaseError(r) => Some(r),
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

/// Inserts `row` unless it is there: refused, having written nothing, if it is.
async fn insert_unless_there(
    conn: &mut AnyConnection,
    savepoint_move: &'static str,
    row: &str,
) -> Result<(), WriteError> {
    // `RETURNING`, not the count of rows affected: SQLite's count is the
    // last insert's, and the savepoint move in front inserts nothing.
    let sql = format!(
        "{savepoint_move}INSERT INTO written (row) VALUES ($1) ON CONFLICT DO NOTHING RETURNING row"
    );
    let inserted = sqlx::query(&sql).bind(row).fetch_all(conn).await?;
    match inserted.len() {
        0 => Err(WriteError::Refused),
        _ => Ok(()),
    }
}

/// Runs `writes` as one batch; each write's result, in order.
async fn one_batch(db: &Database, writes: &[Write]) -> Vec<Result<(), WriteError>> {
    let batches = db.batches();
    let before = batches.stats();
    let held = batches.hold().await;
    let running = writes.iter().map(|&write| async move {
        match write {
            Write::Conditional(_)
            | Write::ConditionalThenFail(_)
            | Write::ConditionalDatabaseError(_) => batches.run_conditional(job(write)).await,
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
    let results = futures::future::join(
        join_all(running),
        release_when_queued(batches, held, writes.len() - 1),
    )
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

/// Lets the writers fill a batch (drops `held`) once `jobs` wait in the
/// queue: the first of a batch's jobs is taken by a writer, which then waits
/// on `held` before it takes the rest.
async fn release_when_queued(
    batches: &GroupCommit,
    held: tokio::sync::RwLockWriteGuard<'_, ()>,
    jobs: usize,
) {
    for _ in 0..1000 {
        if batches.queued() >= jobs {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(held);
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
                Write::Conditional(row) => insert_unless_there(conn, savepoint_move, row).await,
                Write::ConditionalThenFail(row) => {
                    insert_unless_there(conn, savepoint_move, row).await?;
                    Err(WriteError::AfterWrite)
                }
                Write::ConditionalDatabaseError(row) => {
                    let sql =
                        format!("{savepoint_move}INSERT INTO written (row) VALUES ($1), ($1)");
                    sqlx::query(&sql).bind(row).execute(conn).await?;
                    Ok(())
                }
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
        // A refused conditional write found its row written by another.
        let refused = matches!(result, Err(WriteError::Refused));
        if let Some(row) = write.row().filter(|_| !refused) {
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
    for dialect in dialects() {
        let (_place, db) = open(dialect).await;
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
        assert_eq!(rows(&db).await, ["a", "c", "d", "g", "h"], "{dialect:?}");
        assert_told_the_truth(&db, &writes, &results).await;
        assert!(
            matches!(results[1], Err(WriteError::Refused)),
            "{results:?}"
        );
    }
}

#[tokio::test]
async fn a_refused_conditional_job_is_undone_alone_and_one_failing_after_its_write_takes_the_writes_sharing_its_savepoint()
 {
    for dialect in dialects() {
        let (_place, db) = open(dialect).await;
        let writes = [
            Write::Conditional("a"),
            Write::Conditional("a"), // refused: wrote nothing
            Write::Ordinary("c"),    // a savepoint in front (both dialects)
            Write::Conditional("d"),
            Write::ConditionalThenFail("e"),
            Write::Conditional("f"),
            Write::OneTripThenFail("g"),
            Write::Conditional("h"),
        ];
        let results = one_batch(&db, &writes).await;
        assert!(
            matches!(results[1], Err(WriteError::Refused)),
            "{results:?}"
        );
        assert!(
            matches!(results[4], Err(WriteError::AfterWrite)),
            "{results:?}"
        );
        let expected: &[&str] = match dialect {
            // Every job had its own savepoint.
            Dialect::Sqlite => &["a", "c", "d", "f", "h"],
            // "e" shared the savepoint moved in front of "c": "c" and "d"
            // were rolled back with it and told so.
            Dialect::Postgres => &["a", "f", "h"],
        };
        assert_eq!(rows(&db).await, expected, "{dialect:?}");
        assert_told_the_truth(&db, &writes, &results).await;
        if dialect == Dialect::Postgres {
            for undone in [2, 3] {
                assert!(
                    matches!(results[undone], Err(WriteError::NotCommitted(_))),
                    "{results:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_conditional_job_the_database_refuses_leaves_the_batch_committable() {
    for dialect in dialects() {
        let (_place, db) = open(dialect).await;
        // On PostgreSQL the failed statement aborts the transaction: only
        // the rollback to the savepoint in front makes it usable again.
        let writes = [
            Write::Conditional("a"),
            Write::Ordinary("b"),
            Write::Conditional("c"),
            Write::ConditionalDatabaseError("x"),
            Write::Conditional("d"),
            Write::ConditionalDatabaseError("y"),
        ];
        let results = one_batch(&db, &writes).await;
        assert!(
            matches!(results[3], Err(WriteError::Database(_))),
            "{results:?}"
        );
        assert!(
            matches!(results[5], Err(WriteError::Database(_))),
            "{results:?}"
        );
        let expected: &[&str] = match dialect {
            Dialect::Sqlite => &["a", "b", "c", "d"],
            // "b" and "c" shared "x"'s savepoint, and "d" "y"'s.
            Dialect::Postgres => &["a"],
        };
        assert_eq!(rows(&db).await, expected, "{dialect:?}");
        assert_told_the_truth(&db, &writes, &results).await;
    }
}

#[tokio::test]
async fn a_one_trip_job_that_fails_without_its_savepoint_move_fails_the_batch_instead_of_undoing_a_neighbour()
 {
    let (_place, db) = open(Dialect::Sqlite).await;
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
    let (_place, db) = open(Dialect::Sqlite).await;
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

/// Two writers' batches (two processes' group commits on one PostgreSQL
/// database) that take two rows in opposite orders, as two consumer
/// instances do with one message's inbox rows: each first takes its own
/// row, then tries the other's, three times.
#[tokio::test]
async fn a_deadlock_between_two_writers_fails_one_write_and_both_batches_commit_the_rest() {
    if !postgres_available() {
        return;
    }
    let (place, first) = open(Dialect::Postgres).await;
    let Place::Postgres(pg) = &place else {
        unreachable!("opened on PostgreSQL")
    };
    let second = Database::connect(&pg.url, 4).await.unwrap();
    // Both batches hold their own row before either reaches for the other's.
    let both_hold_theirs = Arc::new(Barrier::new(2));
    let crossing = |db: Database, own: &'static str, other: &'static str| {
        let barrier = both_hold_theirs.clone();
        async move {
            let batches = db.batches();
            let held = batches.hold().await;
            let take_own: OneTripJob<(), WriteError> = Box::new(move |conn, savepoint_move| {
                Box::pin(async move {
                    let taken = insert_unless_there(conn, savepoint_move, own).await;
                    barrier.wait().await;
                    taken
                })
            });
            let mut writes = vec![batches.run_one_trip(take_own)];
            for _ in 0..3 {
                writes.push(batches.run_one_trip(Box::new(move |conn, savepoint_move| {
                    Box::pin(insert_unless_there(conn, savepoint_move, other))
                })));
            }
            let writes = join_all(writes);
            futures::future::join(writes, release_when_queued(batches, held, 3))
                .await
                .0
        }
    };
    let (a, b) = futures::future::join(
        crossing(first.clone(), "x", "y"),
        crossing(second.clone(), "y", "x"),
    )
    .await;
    let results: Vec<_> = a.into_iter().chain(b).collect();
    let failed = results
        .iter()
        .filter(|r| matches!(r, Err(WriteError::Database(_))))
        .count();
    // PostgreSQL fails one statement of the first deadlock. The transaction
    // that lost then commits and ends, so the other's writes go on; had it
    // run on, its next write would deadlock again with rows it still held.
    assert_eq!(failed, 1, "{results:#?}");
    assert!(
        results.iter().all(|r| matches!(
            r,
            Ok(()) | Err(WriteError::Refused | WriteError::Database(_))
        )),
        "{results:#?}"
    );
    assert_eq!(rows(&first).await, ["x", "y"]);
}

/// Writers keep their connections while batches follow one another (decision
/// 0049), and give them back to the pool once the queue empties, so that a
/// quiet database holds no connection a writer took.
#[tokio::test]
async fn writers_give_their_connections_back_when_the_queue_empties() {
    for dialect in dialects() {
        let (_place, db) = open(dialect).await;
        let batches = db.batches();
        // Many more callers at once than one batch holds: batches follow
        // one another, each writer's on the connection it kept.
        let written: Vec<String> = (0..500).map(|i| format!("r{i:03}")).collect();
        let results = join_all(written.iter().cloned().map(|row| {
            batches.run_conditional(Box::new(move |conn, savepoint_move| {
                Box::pin(async move { insert_unless_there(conn, savepoint_move, &row).await })
            }))
        }))
        .await;
        assert!(results.iter().all(Result::is_ok), "{dialect:?}");
        assert!(
            batches.stats().batches < 500,
            "{dialect:?}: the writes were batched"
        );
        let all_idle = async {
            while db.pool.num_idle() < db.pool.size() as usize {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), all_idle)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{dialect:?}: {} of the pool's {} connections still taken",
                    db.pool.size() as usize - db.pool.num_idle(),
                    db.pool.size()
                )
            });
        if dialect == Dialect::Postgres {
            // Nor a transaction begun for a batch that did not come (0050).
            let begun: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
            )
            .fetch_one(&db.pool)
            .await
            .unwrap();
            assert_eq!(begun, 0, "sessions idle in a transaction");
        }
        assert_eq!(rows(&db).await, written, "{dialect:?}");
    }
}

/// On PostgreSQL a commit carries the next transaction's `BEGIN` when work
/// waits (decision 0050). A `COMMIT` that fails runs nothing after it: its
/// batch's callers are told so, and the writer's next batch begins its own
/// transaction (were its writes run outside one, each would commit on its
/// own, whatever its caller is told).
#[tokio::test]
async fn a_commit_that_fails_while_work_waits_fails_its_batch_and_the_next_begins_afresh() {
    if !postgres_available() {
        return;
    }
    let (_place, db) = open(Dialect::Postgres).await;
    db.pool
        .execute(
            "CREATE TABLE deferred (v TEXT, \
             CONSTRAINT deferred_once UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)",
        )
        .await
        .unwrap();
    let batches = db.batches();
    // Many more writes at once than the writers' batches hold, so work
    // waits at each commit. Two values are written twice, which PostgreSQL
    // finds only at `COMMIT`: for each pair, the commit of one of the two
    // batches holding it fails (or of the one holding both).
    let written: Vec<String> = (0..600).map(|i| format!("r{i:03}")).collect();
    let results = join_all(written.iter().enumerate().map(|(i, row)| {
        let (row, value) = (row.clone(), format!("v{}", i - usize::from(i % 300 == 101)));
        batches.run::<(), WriteError>(Box::new(move |conn| {
            Box::pin(async move {
                insert(&mut *conn, "", &row).await?;
                sqlx::query("INSERT INTO deferred (v) VALUES ($1)")
                    .bind(value)
                    .execute(conn)
                    .await?;
                Ok(())
            })
        }))
    }))
    .await;
    let writes: Vec<Write> = written
        .iter()
        .map(|row| Write::Ordinary(Box::leak(row.clone().into_boxed_str())))
        .collect();
    assert_told_the_truth(&db, &writes, &results).await;
    let not_committed = results
        .iter()
        .filter(|r| matches!(r, Err(WriteError::NotCommitted(_))))
        .count();
    assert!(not_committed > 0, "some commits failed");
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Ok(()) | Err(WriteError::NotCommitted(_)))),
        "a write failed by itself: it ran outside a transaction"
    );
    assert!(rows(&db).await.len() >= 300, "the other batches committed");
}
