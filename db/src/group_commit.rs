//! Group commit: the API path's writes, gathered from concurrent requests
//! into one transaction, so one commit (one fsync on SQLite, one WAL flush on
//! PostgreSQL) makes a whole batch durable.
//!
//! Each write is a *job*: a closure run on the batch's connection inside its
//! own savepoint. A job that fails (its fence lost, the database refused a
//! statement) is rolled back to its savepoint and answered at once, alone;
//! the rest of its batch goes on. The jobs that succeeded are answered only
//! after the batch commits, so nothing is acknowledged before it is durable,
//! and a crash between the commit and the answers loses no acknowledged
//! write (the callers retry and find what committed).
//!
//! ```text
//! request ─► run(job) ─► queue ─► writer: BEGIN
//!                                   ├─ job 1: SAVEPOINT · statements · RELEASE   (answer held)
//!                                   ├─ job 2: SAVEPOINT · statements · ROLLBACK TO (answered: its error)
//!                                   └─ job n …
//!                                  COMMIT ─► answers of jobs 1, 3 … n
//! ```
//!
//! SQLite has one writer task (it allows one writer; the task takes the
//! database's write gate per batch, so the gate's other users still queue
//! with it, decision 0007). PostgreSQL has [`POSTGRES_WRITERS`], each on its
//! own connection per batch. A job waits while a batch commits, which is what
//! lets the next batch gather: the more callers, the larger the batches. See
//! decision 0037.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::FutureExt;
use futures::future::BoxFuture;
use sqlx::{AnyConnection, AnyPool, Executor};
use tokio::sync::{mpsc, oneshot};

use once_failpoints::crash_point;

use crate::Dialect;

/// At most this many jobs share one commit.
pub const MAX_BATCH: usize = 64;

/// Writer tasks (each a connection while it commits) on PostgreSQL.
pub const POSTGRES_WRITERS: usize = 4;

/// One write: statements on the batch's connection (already inside the
/// job's savepoint), returning what the caller gets once the batch commits.
pub type Job<T, E> =
    Box<dyn for<'c> FnOnce(&'c mut AnyConnection) -> BoxFuture<'c, Result<T, E>> + Send>;

/// A write that ran without error but did not commit (its batch failed), or
/// never ran: the database is unavailable, the write is not done.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BatchFailed(String);

/// A job with its result type erased: runs, says whether it succeeded, and
/// returns how to answer its caller once the batch's fate is known.
type Queued = Box<dyn for<'c> FnOnce(&'c mut AnyConnection) -> BoxFuture<'c, Ran> + Send>;

/// Answers a job's caller: with the job's result, or with the commit's
/// failure (`Some(why)`) when its batch did not commit.
type Answer = Box<dyn FnOnce(Option<&str>) + Send>;

/// What a queued job did.
struct Ran {
    ok: bool,
    /// Sends the job's result, or the commit's failure when the batch did
    /// not commit.
    answer: Answer,
}

/// The queue in front of the writer tasks. Clones share it.
#[derive(Clone)]
pub struct GroupCommit {
    queue: mpsc::Sender<Queued>,
    shared: Arc<Shared>,
}

/// SQLite's write gate ([`crate::Database::writer`]).
pub type Gate = Arc<tokio::sync::Mutex<()>>;

/// What one writer task commits on.
struct Writer {
    pool: AnyPool,
    dialect: Dialect,
    gate: Option<Gate>,
}

/// What the writers share with the handle.
#[derive(Default)]
struct Shared {
    /// The queue's receiving end: the writer holding it gathers the next
    /// batch while the others commit theirs.
    jobs: tokio::sync::Mutex<Option<mpsc::Receiver<Queued>>>,
    /// Taken (shared) by a writer while it fills a batch; [`GroupCommit::hold`]
    /// takes it exclusively so that a test can queue a batch's jobs first.
    filling: tokio::sync::RwLock<()>,
    batches: AtomicU64,
    jobs_run: AtomicU64,
}

/// Batches committed and jobs run, since the store started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchStats {
    pub batches: u64,
    pub jobs: u64,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("queued", &self.queued())
            .finish()
    }
}

impl GroupCommit {
    /// Starts the writer tasks on `pool` (one on SQLite, [`POSTGRES_WRITERS`]
    /// on PostgreSQL). They stop when the last clone is dropped.
    pub fn start(pool: AnyPool, dialect: Dialect, gate: Option<Gate>) -> Self {
        let (queue, jobs) = mpsc::channel::<Queued>(4 * MAX_BATCH);
        let shared = Arc::new(Shared {
            jobs: tokio::sync::Mutex::new(Some(jobs)),
            ..Shared::default()
        });
        let writers = match dialect {
            Dialect::Sqlite => 1,
            Dialect::Postgres => POSTGRES_WRITERS,
        };
        for _ in 0..writers {
            let writer = Writer {
                pool: pool.clone(),
                dialect,
                gate: gate.clone(),
            };
            tokio::spawn(write_batches(writer, shared.clone()));
        }
        Self { queue, shared }
    }

    /// Runs `job` in the next batch; its result once the batch committed
    /// (or its own error at once, when it failed).
    pub async fn run<T, E>(&self, job: Job<T, E>) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<BatchFailed> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let queued: Queued = Box::new(move |conn| {
            Box::pin(async move {
                let result = job(conn).await;
                let ok = result.is_ok();
                let answer = Box::new(move |commit_failed: Option<&str>| {
                    let result = match commit_failed {
                        Some(why) if ok => {
                            Err(BatchFailed(format!("the batch did not commit: {why}")).into())
                        }
                        _ => result,
                    };
                    let _ = tx.send(result);
                });
                Ran { ok, answer }
            })
        });
        self.queue
            .send(queued)
            .await
            .map_err(|_| BatchFailed("the group commit has stopped".into()))?;
        rx.await.unwrap_or_else(|_| {
            Err(
                BatchFailed("the batch failed before this write ran (the log says why)".into())
                    .into(),
            )
        })
    }

    /// Jobs waiting for a writer.
    pub fn queued(&self) -> usize {
        self.queue.max_capacity() - self.queue.capacity()
    }

    pub fn stats(&self) -> BatchStats {
        BatchStats {
            batches: self.shared.batches.load(Ordering::Relaxed),
            jobs: self.shared.jobs_run.load(Ordering::Relaxed),
        }
    }

    /// Keeps the writers from filling a batch until the guard drops: the
    /// jobs queued meanwhile (up to [`MAX_BATCH`]) then commit as one batch.
    /// For tests that need a known batch.
    pub async fn hold(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.shared.filling.write().await
    }
}

/// One writer task, until the queue closes: waits for a job, takes what else
/// is queued (up to [`MAX_BATCH`]) and commits it all as one batch. Writers
/// take turns at the queue; the one holding it gathers the next batch while
/// the others commit theirs.
async fn write_batches(writer: Writer, shared: Arc<Shared>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        {
            let mut jobs = shared.jobs.lock().await;
            let Some(queue) = jobs.as_mut() else { return };
            let Some(first) = queue.recv().await else {
                *jobs = None;
                return;
            };
            batch.push(first);
            let _filling = shared.filling.read().await;
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
        }
        shared.batches.fetch_add(1, Ordering::Relaxed);
        shared
            .jobs_run
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        commit(&writer, &mut batch).await;
    }
}

/// Runs and commits one batch, answering every job in it. (Boxed with its
/// `Send` bound spelled out: the compiler cannot prove it through sqlx's
/// higher-ranked executor bounds on its own.)
fn commit<'a>(db: &'a Writer, batch: &'a mut Vec<Queued>) -> BoxFuture<'a, ()> {
    Box::pin(async move {
        let _gate = match &db.gate {
            Some(gate) => Some(gate.lock().await),
            None => None,
        };
        let mut conn = match db.pool.acquire().await {
            Ok(conn) => conn,
            Err(e) => return fail_all(batch.drain(..), &e.to_string()),
        };
        // A batch of one needs no savepoint: its failure is the transaction's.
        let alone = batch.len() == 1;
        let begin = match (db.dialect, alone) {
            (Dialect::Sqlite, true) => "BEGIN IMMEDIATE",
            (Dialect::Sqlite, false) => "BEGIN IMMEDIATE; SAVEPOINT job",
            (Dialect::Postgres, true) => "BEGIN",
            (Dialect::Postgres, false) => "BEGIN; SAVEPOINT job",
        };
        if let Err(e) = statement(&mut conn, begin).await {
            conn.close_on_drop();
            return fail_all(batch.drain(..), &e.to_string());
        }
        let mut held = Vec::with_capacity(batch.len());
        let mut jobs = batch.drain(..);
        let mut broken = None;
        let mut left = jobs.len();
        for job in jobs.by_ref() {
            left -= 1;
            let ran = AssertUnwindSafe(job(&mut conn)).catch_unwind().await;
            let ran = match ran {
                Ok(ran) => ran,
                Err(panic) => {
                    broken = Some(format!("a job panicked: {}", panic_message(&*panic)));
                    break;
                }
            };
            // After a success the savepoint moves past it (after the last
            // job the commit follows instead); after a failure the job's
            // statements are undone and the savepoint stays where it was.
            let next = match (ran.ok, left == 0, alone) {
                (true, true, _) => None,
                (true, false, _) => Some("RELEASE SAVEPOINT job; SAVEPOINT job"),
                (false, _, true) => Some("ROLLBACK"),
                (false, _, false) => Some("ROLLBACK TO SAVEPOINT job"),
            };
            let step = match next {
                Some(sql) => statement(&mut conn, sql).await,
                None => Ok(()),
            };
            if ran.ok {
                held.push(ran.answer);
            } else {
                (ran.answer)(None);
            }
            if let Err(e) = step {
                broken = Some(e.to_string());
                break;
            }
        }
        if let Some(why) = broken {
            let _ = statement(&mut conn, "ROLLBACK").await;
            conn.close_on_drop();
            for answer in held {
                answer(Some(&why));
            }
            return fail_all(jobs, &why);
        }
        drop(jobs);
        if alone && held.is_empty() {
            return; // its one job failed and was rolled back with the transaction
        }
        let committed = statement(&mut conn, "COMMIT").await;
        let why = committed.as_ref().err().map(|e| {
            conn.close_on_drop();
            e.to_string()
        });
        if why.is_none() {
            crash_point("after_batch_commit");
        }
        for answer in held {
            answer(why.as_deref());
        }
    })
}

/// Runs `sql` (one or more statements, no parameters) on the batch's
/// connection. A function of its own so the future's lifetimes are concrete
/// (sqlx's executor bound is higher-ranked, which `Send` checks of the
/// surrounding future trip over).
fn statement<'c>(
    conn: &'c mut AnyConnection,
    sql: &'static str,
) -> BoxFuture<'c, Result<(), sqlx::Error>> {
    Box::pin(async move { conn.execute(sql).await.map(|_| ()) })
}

/// Answers jobs that never ran (the batch could not start, or broke
/// first) by dropping them: each caller's channel closes and
/// [`GroupCommit::run`] reports the write unavailable. The log says why, once
/// per batch.
fn fail_all(jobs: impl Iterator<Item = Queued>, why: &str) {
    let dropped = jobs.count();
    if dropped > 0 {
        tracing::warn!(
            jobs = dropped,
            error = why,
            "a group commit batch failed before its jobs ran"
        );
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(not a string)".to_owned())
}
