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
//! request ─► run(job) ─► queue ─► writer: BEGIN · SAVEPOINT s0
//!                                   ├─ job 0: statements                          (answer held)
//!                                   ├─ job 1: RELEASE s0 · SAVEPOINT s1 · statements · ROLLBACK TO s1
//!                                   │                                             (answered: its error)
//!                                   └─ job n: RELEASE s(n-1) · SAVEPOINT s(n) · statements …
//!                                  COMMIT ─► answers of jobs 0, 2 … n
//! ```
//!
//! Moving the savepoint is one more statement per job, and on SQLite every
//! statement is a hand-off to the connection's thread and back. A *one-trip*
//! job ([`GroupCommit::run_one_trip`]: a consumer's batch; the claim and the
//! finish, conditional below) carries the move at
//! the head of its first query instead, so it costs no hand-off of its own.
//! That is safe even if such a job never runs its first query: savepoint
//! names cycle through three (`s0`, `s1`, `s2`), and the move of job `n`
//! releases `s(n-1)`, so the savepoint a job rolls back to, or the next job
//! releases, exists only if the job's own move ran. When it did not, the
//! rollback or the release fails and the whole batch with it (every caller
//! told it did not commit): never a rollback to an earlier job's savepoint,
//! which would undo writes already held as successes.
//!
//! On PostgreSQL every statement is a round trip, and there the move is one
//! query of its own. A *conditional* job ([`GroupCommit::run_conditional`]:
//! the claim and the finish, each one statement whose writes all hang on a
//! condition it checks — the key still free, the fence still held) runs
//! without a savepoint there: its refusal ([`Refusal::wrote_nothing`]) left
//! nothing to undo, and anything else it fails with (a database error, which
//! aborts PostgreSQL's transaction, or an error after a write) is rolled back
//! to the savepoint in front, with the jobs written since it: those are told
//! their batch did not commit, as if it had failed. See decision 0047.
//! On PostgreSQL the claims and the finishes that wait for the same batch
//! are gathered into one conditional job each, whose one statement writes
//! or refuses every row on its own condition ([`crate::Gatherer`],
//! decision 0068).
//!
//! A job that fails on PostgreSQL (other than by a refusal that wrote
//! nothing) ends its transaction early: what is held commits, and the rest
//! of the batch runs in a new transaction. Its failure may have been a
//! deadlock with another writer's batch (another process's, say, holding a
//! consumer's inbox row for the same message), and that transaction waits
//! on the rows this one holds; running on would make the next job that
//! touches them deadlock again, a second each time, until the batch ends.
//!
//! SQLite has one writer task (it allows one writer; the task takes the
//! database's write gate per batch, so the gate's other users still queue
//! with it, decision 0007). PostgreSQL has [`POSTGRES_WRITERS`], each on its
//! own connection. A job waits while a batch commits, which is what lets the
//! next batch gather: the more callers, the larger the batches. See decision
//! 0037. A writer keeps its connection while batches follow one another, and
//! gives it back to the pool when the queue empties (decision 0049). On
//! PostgreSQL, while work waits, a batch's `COMMIT` carries the next one's
//! `BEGIN` in the same query, so the next batch starts without a round trip
//! (decision 0050).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use sqlx::Either;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Executor};
use tokio::sync::{mpsc, oneshot};

use once_failpoints::crash_point;

use crate::Dialect;

/// At most this many jobs share one commit.
pub const MAX_BATCH: usize = 64;

/// Writer tasks (each a connection while it has work) on PostgreSQL.
pub const POSTGRES_WRITERS: usize = 4;

/// One write: statements on the batch's connection (already inside the
/// job's savepoint), returning what the caller gets once the batch commits.
pub type Job<T, E> =
    Box<dyn for<'c> FnOnce(&'c mut AnyConnection) -> BoxFuture<'c, Result<T, E>> + Send>;

/// A write that ran without error but did not commit (its batch failed), or
/// never ran: the database is unavailable, the write is not done.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BatchFailed(pub(crate) String);

impl BatchFailed {
    /// For a write whose answer never came: its batch failed before it ran.
    pub(crate) fn never_ran() -> Self {
        BatchFailed("the batch failed before this write ran (the log says why)".into())
    }
}

/// A write that makes its first trip to the database with one query (SQLite
/// runs the statements of one query string in turn) and puts
/// `savepoint_move` (empty, or statements each ending with `; `) at the head
/// of it: see the module docs. On PostgreSQL the move is always empty (one
/// statement per query there; the writer moves the savepoint itself).
pub type OneTripJob<T, E> = Box<
    dyn for<'c> FnOnce(&'c mut AnyConnection, &'static str) -> BoxFuture<'c, Result<T, E>> + Send,
>;

/// What a conditional job's error says about what it left written
/// ([`GroupCommit::run_conditional`]).
pub trait Refusal {
    /// True only for a refusal found by a statement that ran and wrote
    /// nothing (the fence it checks lost, say): the transaction is as the
    /// job found it. Every other error must answer false.
    fn wrote_nothing(&self) -> bool;
}

/// A job with its result type erased: runs (given the savepoint move a
/// one-trip job leads with), says whether it succeeded, and returns how to
/// answer its caller once the batch's fate is known.
struct Queued {
    run: RunJob,
    kind: Kind,
}

/// What a job promises about its queries, which decides who puts a
/// savepoint in front of it (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Any statements: the writer moves the savepoint for it.
    Ordinary,
    /// Its first query leads with the savepoint move it is handed (SQLite).
    OneTrip,
    /// A one-trip job whose refusals write nothing: no savepoint of its own
    /// on PostgreSQL.
    Conditional,
}

impl Kind {
    /// Who moves the savepoint in front of a job of this kind, on `dialect`.
    fn savepoint(self, dialect: Dialect) -> Savepoint {
        match (self, dialect) {
            (Kind::Ordinary, _) | (Kind::OneTrip, Dialect::Postgres) => Savepoint::Writer,
            (Kind::OneTrip | Kind::Conditional, Dialect::Sqlite) => Savepoint::Carried,
            (Kind::Conditional, Dialect::Postgres) => Savepoint::Shared,
        }
    }
}

/// Who puts a savepoint in front of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Savepoint {
    /// The writer, with a statement of its own.
    Writer,
    /// The job, at the head of its first query.
    Carried,
    /// No one: the job shares the savepoint in front with the jobs before it.
    Shared,
}

type RunJob =
    Box<dyn for<'c> FnOnce(&'c mut AnyConnection, &'static str) -> BoxFuture<'c, Ran> + Send>;

/// Savepoint names cycle through three (module docs): the statements that
/// move the savepoint in front of job `n`, by `n % 3` (sent by the writer,
/// or put at the head of a one-trip job's query, hence the closing `; `) …
const SAVEPOINT_MOVE: [&str; 3] = [
    "RELEASE SAVEPOINT s2; SAVEPOINT s0; ",
    "RELEASE SAVEPOINT s0; SAVEPOINT s1; ",
    "RELEASE SAVEPOINT s1; SAVEPOINT s2; ",
];
/// … and what undoes job `n` alone.
const ROLLBACK_TO: [&str; 3] = [
    "ROLLBACK TO SAVEPOINT s0",
    "ROLLBACK TO SAVEPOINT s1",
    "ROLLBACK TO SAVEPOINT s2",
];

/// Why a job that succeeded did not commit: a conditional job after it,
/// sharing its savepoint, failed with a database error.
const SHARED_ROLLBACK: &str = "rolled back with a write beside it in the batch, which failed";

/// Answers a job's caller: with the job's result, or with the commit's
/// failure (`Some(why)`) when its batch did not commit.
type Answer = Box<dyn FnOnce(Option<&str>) + Send>;

/// What a queued job did.
struct Ran {
    ok: bool,
    /// It failed with a refusal that wrote nothing ([`Refusal`]).
    wrote_nothing: bool,
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
    /// The queue's sending end, held weakly (the writers stop when the last
    /// handle drops): what tells a writer that work waits.
    queue: Option<mpsc::WeakSender<Queued>>,
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
            queue: Some(queue.downgrade()),
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
        self.queue(Box::new(move |conn, _| job(conn)), Kind::Ordinary, |_| {
            false
        })
        .await
    }

    /// [`GroupCommit::run`] for a job whose first query leads with the
    /// savepoint move it is given ([`OneTripJob`]), which spares a SQLite
    /// batch one hand-off per job.
    pub async fn run_one_trip<T, E>(&self, job: OneTripJob<T, E>) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<BatchFailed> + Send + 'static,
    {
        self.queue(job, Kind::OneTrip, |_| false).await
    }

    /// [`GroupCommit::run_one_trip`] for a job whose every write hangs on a
    /// condition its one statement checks, so that its refusals write
    /// nothing ([`Refusal::wrote_nothing`]). On PostgreSQL it runs without a
    /// savepoint of its own, which spares a round trip; if it fails any other
    /// way, the jobs written since the savepoint in front of it are rolled
    /// back with it and told their batch did not commit (module docs). Use
    /// it only for jobs that fail that way rarely: a database error, not a
    /// request's outcome.
    pub async fn run_conditional<T, E>(&self, job: OneTripJob<T, E>) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<BatchFailed> + Refusal + Send + 'static,
    {
        self.queue(job, Kind::Conditional, E::wrote_nothing).await
    }

    async fn queue<T, E>(
        &self,
        job: OneTripJob<T, E>,
        kind: Kind,
        wrote_nothing: fn(&E) -> bool,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<BatchFailed> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let run: RunJob = Box::new(move |conn, savepoint_move| {
            Box::pin(async move {
                let result = job(conn, savepoint_move).await;
                let ok = result.is_ok();
                let wrote_nothing = result.as_ref().err().is_some_and(wrote_nothing);
                let answer = Box::new(move |commit_failed: Option<&str>| {
                    let result = match commit_failed {
                        Some(why) if ok => {
                            Err(BatchFailed(format!("the batch did not commit: {why}")).into())
                        }
                        _ => result,
                    };
                    let _ = tx.send(result);
                });
                Ran {
                    ok,
                    wrote_nothing,
                    answer,
                }
            })
        });
        self.queue
            .send(Queued { run, kind })
            .await
            .map_err(|_| BatchFailed("the group commit has stopped".into()))?;
        rx.await
            .unwrap_or_else(|_| Err(BatchFailed::never_ran().into()))
    }

    /// Jobs waiting for a writer.
    pub fn queued(&self) -> usize {
        queued(&self.queue)
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
///
/// A writer keeps its connection from one batch to the next while work
/// waits, and gives it back to the pool when the queue is empty. Taking a
/// PostgreSQL connection from the pool pings it first (a round trip, against
/// a connection that died idle); one kept was in use a moment ago, and if
/// its server died since, its batch fails like one whose server dies
/// mid-batch: every caller is told it did not commit.
async fn write_batches(writer: Writer, shared: Arc<Shared>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut kept = Kept::default();
    loop {
        if !shared.work_waits() {
            kept.release().await;
        }
        {
            let mut jobs = shared.jobs.lock().await;
            let Some(queue) = jobs.as_mut() else {
                return kept.release().await;
            };
            if queue.is_empty() {
                kept.release().await;
            }
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
        commit(&writer, &shared, &mut kept, &mut batch).await;
    }
}

/// A writer's connection between batches: kept while work waits (decision
/// 0049), with the next batch's transaction already begun by the last
/// commit on PostgreSQL (decision 0050).
#[derive(Default)]
struct Kept {
    conn: Option<PoolConnection<Any>>,
    /// `BEGIN; SAVEPOINT s0` ran on `conn` after its last commit.
    begun: bool,
}

impl Kept {
    /// Gives the connection back to the pool, ending the transaction begun
    /// for a batch that did not come.
    async fn release(&mut self) {
        if std::mem::take(&mut self.begun)
            && let Some(conn) = self.conn.as_mut()
            && statement(conn, "ROLLBACK").await.is_err()
        {
            return self.discard();
        }
        self.conn = None;
    }

    /// Closes a connection left in an unknown state rather than give it
    /// back.
    fn discard(&mut self) {
        self.begun = false;
        if let Some(mut conn) = self.conn.take() {
            conn.close_on_drop();
        }
    }
}

impl Shared {
    /// Jobs are queued for a writer (false once the last handle dropped).
    fn work_waits(&self) -> bool {
        let queue = self.queue.as_ref().and_then(mpsc::WeakSender::upgrade);
        queue.is_some_and(|queue| queued(&queue) > 0)
    }
}

fn queued(queue: &mpsc::Sender<Queued>) -> usize {
    queue.max_capacity() - queue.capacity()
}

/// Runs and commits one batch, answering every job in it. (Boxed with its
/// `Send` bound spelled out: the compiler cannot prove it through sqlx's
/// higher-ranked executor bounds on its own.)
fn commit<'a>(
    db: &'a Writer,
    shared: &'a Shared,
    kept: &'a mut Kept,
    batch: &'a mut Vec<Queued>,
) -> BoxFuture<'a, ()> {
    Box::pin(async move {
        let _gate = match &db.gate {
            Some(gate) => Some(gate.lock().await),
            None => None,
        };
        let conn = match &mut kept.conn {
            Some(conn) => conn,
            None => match db.pool.acquire().await {
                Ok(conn) => kept.conn.insert(conn),
                Err(e) => return fail_all(batch.drain(..), &e.to_string()),
            },
        };
        // A batch of one needs no savepoint: its failure is the transaction's.
        let alone = batch.len() == 1;
        let begin = match (db.dialect, alone) {
            (Dialect::Sqlite, true) => "BEGIN IMMEDIATE",
            (Dialect::Sqlite, false) => "BEGIN IMMEDIATE; SAVEPOINT s0",
            (Dialect::Postgres, true) => "BEGIN",
            (Dialect::Postgres, false) => "BEGIN; SAVEPOINT s0",
        };
        // Begun by the last commit (on PostgreSQL, `BEGIN; SAVEPOINT s0`:
        // the savepoint goes unused by a batch of one), or begun now.
        if !std::mem::take(&mut kept.begun)
            && let Err(e) = statement(conn, begin).await
        {
            kept.discard();
            return fail_all(batch.drain(..), &e.to_string());
        }
        // Succeeded jobs, answers held until the commit; `held[exposed..]`
        // were written since the savepoint in front (`s(moves % 3)`), and a
        // rollback to it undoes them too. `first`: no job has run in this
        // transaction yet (the transaction's start put `s0` in front).
        let mut held = Vec::with_capacity(batch.len());
        let (mut moves, mut exposed, mut first) = (0, 0, true);
        let mut jobs = batch.drain(..);
        let mut broken = None;
        while let Some(job) = jobs.next() {
            // The savepoint moves in front of every job but the first: by
            // the writer, or at the head of a one-trip job's query; not for
            // a conditional job on PostgreSQL.
            let savepoint = job.kind.savepoint(db.dialect);
            let mut leading = "";
            if !alone && !first && savepoint != Savepoint::Shared {
                moves += 1;
                exposed = held.len();
                if savepoint == Savepoint::Carried {
                    leading = SAVEPOINT_MOVE[moves % 3];
                } else if let Err(e) = statement(conn, SAVEPOINT_MOVE[moves % 3]).await {
                    broken = Some(e.to_string());
                    break;
                }
            }
            first = false;
            let ran = AssertUnwindSafe((job.run)(conn, leading))
                .catch_unwind()
                .await;
            let ran = match ran {
                Ok(ran) => ran,
                Err(panic) => {
                    broken = Some(format!("a job panicked: {}", panic_message(&*panic)));
                    break;
                }
            };
            if ran.ok {
                held.push(ran.answer);
                continue;
            }
            // A failed job's statements are undone (with those of the jobs
            // sharing its savepoint, when it had none of its own); the
            // savepoint stays in front of where it ran.
            (ran.answer)(None);
            if alone {
                if let Err(e) = statement(conn, "ROLLBACK").await {
                    broken = Some(e.to_string());
                }
                break;
            }
            if savepoint == Savepoint::Shared && ran.wrote_nothing {
                continue;
            }
            if let Err(e) = statement(conn, ROLLBACK_TO[moves % 3]).await {
                broken = Some(e.to_string());
                break;
            }
            let undone = held.len() - exposed;
            if undone > 0 {
                tracing::warn!(
                    undone,
                    "a conditional write failed; the writes sharing its savepoint were rolled back with it"
                );
                for answer in held.drain(exposed..) {
                    answer(Some(SHARED_ROLLBACK));
                }
            }
            // On PostgreSQL the failure may have been a deadlock with another
            // writer's transaction, which waits on the rows this one holds:
            // commit what is held, and run the rest in a new transaction.
            if db.dialect == Dialect::Postgres && !jobs.as_slice().is_empty() {
                match commit_held(conn, &mut held, Then::Begin).await {
                    Ok(Then::Begin) => (moves, exposed, first) = (0, 0, true),
                    Ok(Then::Nothing) => {
                        broken = Some("the transaction after an early commit did not begin".into());
                        break;
                    }
                    Err(why) => {
                        broken = Some(why);
                        break;
                    }
                }
            }
        }
        if let Some(why) = broken {
            let _ = statement(conn, "ROLLBACK").await;
            kept.discard();
            for answer in held {
                answer(Some(&why));
            }
            return fail_all(jobs, &why);
        }
        drop(jobs);
        if alone && held.is_empty() {
            return; // its one job failed and was rolled back with the transaction
        }
        // On PostgreSQL, when work waits (most likely for this writer's
        // next batch), the commit carries the next transaction's `BEGIN`.
        let then = match db.dialect {
            Dialect::Postgres if shared.work_waits() => Then::Begin,
            _ => Then::Nothing,
        };
        match commit_held(conn, &mut held, then).await {
            Ok(done) if done == then => kept.begun = done == Then::Begin,
            _ => kept.discard(),
        }
    })
}

/// What runs after a commit, in the same query (decision 0050).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Nothing,
    /// `BEGIN; SAVEPOINT s0` (PostgreSQL only: on SQLite, a transaction
    /// begun early would hold the write lock while its writer waits).
    Begin,
}

/// Commits the open transaction and answers the jobs held for it: with
/// their results, or with the commit's failure. `then` runs after the
/// `COMMIT` in the same query; what ran of it is returned (the `COMMIT`
/// succeeded even if what followed it failed, which leaves `Then::Nothing`).
async fn commit_held(
    conn: &mut AnyConnection,
    held: &mut Vec<Answer>,
    then: Then,
) -> Result<Then, String> {
    let (sql, statements) = match then {
        Then::Nothing => ("COMMIT", 1),
        Then::Begin => ("COMMIT; BEGIN; SAVEPOINT s0", 3),
    };
    let committed = match statements_done(conn, sql).await {
        (0, failure) => Err(failure.unwrap_or_else(|| "COMMIT gave no answer".into())),
        (done, _) if done == statements => Ok(then),
        _ => Ok(Then::Nothing),
    };
    if committed.is_ok() {
        crash_point("after_batch_commit");
    }
    let why = committed.as_ref().err().map(String::as_str);
    for answer in held.drain(..) {
        answer(why);
    }
    committed
}

/// Runs `sql` (statements without parameters) on the batch's connection
/// and counts the statements that completed, in order, up to the first
/// that failed (PostgreSQL runs none after it), and why that one failed.
fn statements_done<'c>(
    conn: &'c mut AnyConnection,
    sql: &'static str,
) -> BoxFuture<'c, (usize, Option<String>)> {
    Box::pin(async move {
        let mut results = conn.fetch_many(sql);
        let mut done = 0;
        while let Some(result) = results.next().await {
            match result {
                Ok(Either::Left(_)) => done += 1,
                Ok(Either::Right(_)) => {}
                Err(e) => return (done, Some(e.to_string())),
            }
        }
        (done, None)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use once_test_support::postgres::PgDatabase;
    use once_test_support::services::postgres_available;
    use sqlx::Connection;

    use super::*;

    /// A writer giving back a connection it began a transaction on (for a
    /// batch that did not come, decision 0050) ends the transaction first:
    /// the pool would hand it out as it is.
    #[tokio::test]
    async fn a_connection_given_back_holds_no_transaction() {
        if !postgres_available() {
            return;
        }
        let pg = PgDatabase::create().await;
        let db = crate::Database::connect(&pg.url, 2).await.unwrap();
        let mut conn = db.pool.acquire().await.unwrap();
        statement(&mut conn, "BEGIN; SAVEPOINT s0").await.unwrap();
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        let mut kept = Kept {
            conn: Some(conn),
            begun: true,
        };
        kept.release().await;
        assert!(kept.conn.is_none() && !kept.begun);
        // Back in the pool (sqlx returns it from a task of its own).
        let returned = async {
            while db.pool.num_idle() < db.pool.size() as usize {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), returned)
            .await
            .expect("the connection went back to the pool");
        // As another session sees it (the pool would hand out that one).
        let mut other = sqlx::AnyConnection::connect(&pg.url).await.unwrap();
        let state: String = sqlx::query_scalar("SELECT state FROM pg_stat_activity WHERE pid = $1")
            .bind(pid)
            .fetch_one(&mut other)
            .await
            .unwrap();
        assert_eq!(state, "idle");
    }
}
