//! Gathering: the writes of one kind that wait for the same batch run as one
//! job of it, so that one multi-row statement can do what one statement per
//! write did (decision 0068).
//!
//! A [`Gatherer`] keeps the writes of its kind that no job has taken yet.
//! The first write to find none waiting queues one job with the group
//! commit ([`GroupCommit::run_conditional`]); every write that arrives
//! before that job runs joins it; the job takes them all when the writer
//! reaches it, and a write that arrives after that starts the next job. So
//! no write waits for a gathering that would not have waited without it:
//! the first is queued at once, as it was, and the others ride along.
//!
//! ```text
//! claim a ─► pending [a]      ─► job queued ──────────► writer runs it: takes [a b c]
//! claim b ─► pending [a b]                               one statement, a row each
//! claim c ─► pending [a b c]                             answers held for the commit
//! claim d ─► pending [d]      ─► next job queued …
//! ```
//!
//! Each write is answered on its own, after its batch commits: with its own
//! outcome (a refusal that wrote nothing for its row — a lost fence, a key
//! already taken — is one outcome among others, and the rest of the rows
//! commit), or with the batch's failure. A job that fails as a whole (a
//! database error) is a conditional job's failure: rolled back with the
//! writes sharing its savepoint, every one of its writes told it did not
//! commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use sqlx::AnyConnection;
use tokio::sync::oneshot;

use crate::group_commit::{BatchFailed, GroupCommit, Refusal};

/// Runs a gathered job: the rows taken (in the order they arrived) on the
/// batch's connection, behind `savepoint_move` as a one-trip job
/// ([`crate::group_commit::OneTripJob`]); one outcome per row, in the same
/// order, or an error that fails them all (as does a count of outcomes that
/// is not the count of rows).
pub type RunGathered<I, O, E> = Arc<
    dyn for<'c> Fn(
            &'c mut AnyConnection,
            &'static str,
            Vec<I>,
        ) -> BoxFuture<'c, Result<Vec<Result<O, E>>, E>>
        + Send
        + Sync,
>;

/// A write waiting for a job to take it, and where its outcome goes.
struct Waiting<I, O, E> {
    row: I,
    answer: oneshot::Sender<Result<O, E>>,
}

type Answers<O, E> = Vec<oneshot::Sender<Result<O, E>>>;

/// Gathers writes of one kind into jobs of the group commit (module docs).
/// Clones share the writes waiting.
pub struct Gatherer<I, O, E> {
    batches: GroupCommit,
    pending: Arc<Mutex<Vec<Waiting<I, O, E>>>>,
    run: RunGathered<I, O, E>,
    counts: Arc<Counts>,
}

/// Jobs a gatherer ran and the rows they took, since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GatherStats {
    pub jobs: u64,
    pub rows: u64,
}

#[derive(Debug, Default)]
struct Counts {
    jobs: AtomicU64,
    rows: AtomicU64,
}

impl<I, O, E> Clone for Gatherer<I, O, E> {
    fn clone(&self) -> Self {
        Self {
            batches: self.batches.clone(),
            pending: self.pending.clone(),
            run: self.run.clone(),
            counts: self.counts.clone(),
        }
    }
}

impl<I, O, E> std::fmt::Debug for Gatherer<I, O, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gatherer")
            .field("waiting", &lock(&self.pending).len())
            .finish()
    }
}

impl<I, O, E> Gatherer<I, O, E>
where
    I: Send + 'static,
    O: Send + 'static,
    E: From<BatchFailed> + Refusal + std::error::Error + Send + 'static,
{
    /// A gatherer whose jobs run `run` in `batches`.
    pub fn new(batches: GroupCommit, run: RunGathered<I, O, E>) -> Self {
        Self {
            batches,
            pending: Arc::default(),
            run,
            counts: Arc::default(),
        }
    }

    /// Writes waiting for a job to take them.
    pub fn waiting(&self) -> usize {
        lock(&self.pending).len()
    }

    pub fn stats(&self) -> GatherStats {
        GatherStats {
            jobs: self.counts.jobs.load(Ordering::Relaxed),
            rows: self.counts.rows.load(Ordering::Relaxed),
        }
    }

    /// Writes `row` with whatever else waits for the same job; its outcome
    /// once the batch committed.
    pub async fn write(&self, row: I) -> Result<O, E> {
        let (answer, outcome) = oneshot::channel();
        let first = {
            let mut pending = lock(&self.pending);
            pending.push(Waiting { row, answer });
            pending.len() == 1
        };
        if first {
            self.queue_job();
        }
        outcome
            .await
            .unwrap_or_else(|_| Err(BatchFailed::never_ran().into()))
    }

    /// Queues the job that takes what waits when the writer reaches it, and
    /// answers its writes. Runs on a task of its own: the caller that
    /// started it may go away (its client hung up), the others still wait.
    fn queue_job(&self) {
        let Self {
            batches,
            pending,
            run,
            counts,
        } = self.clone();
        // Where the job leaves the answers of the writes it took.
        let taken: Arc<Mutex<Option<Answers<O, E>>>> = Arc::default();
        let job_taken = taken.clone();
        let job_pending = pending.clone();
        tokio::spawn(async move {
            let outcome = batches
                .run_conditional(Box::new(move |conn, savepoint_move| {
                    let waiting = std::mem::take(&mut *lock(&job_pending));
                    counts.jobs.fetch_add(1, Ordering::Relaxed);
                    counts
                        .rows
                        .fetch_add(waiting.len() as u64, Ordering::Relaxed);
                    let (rows, answers): (Vec<I>, Answers<O, E>) =
                        waiting.into_iter().map(|w| (w.row, w.answer)).unzip();
                    *lock(&job_taken) = Some(answers);
                    let taken = rows.len();
                    let job = run(conn, savepoint_move, rows);
                    Box::pin(async move {
                        match job.await {
                            // Every write must be answered with what is
                            // true of it: a job that lost count fails, and
                            // its writes roll back.
                            Ok(outcomes) if outcomes.len() != taken => Err(BatchFailed(format!(
                                "a gathered job answered {} of its {taken} writes",
                                outcomes.len()
                            ))
                            .into()),
                            done => done,
                        }
                    })
                }))
                .await;
            match (lock(&taken).take(), outcome) {
                (Some(answers), Ok(outcomes)) => {
                    for (answer, outcome) in answers.into_iter().zip(outcomes) {
                        let _ = answer.send(outcome);
                    }
                }
                (Some(answers), Err(e)) => fail(answers, &chain(&e)),
                // The job never ran (the batch broke before it, or the
                // group commit stopped): what waits was waiting for it, and
                // no other job was queued while it did.
                (None, outcome) => {
                    let waiting = std::mem::take(&mut *lock(&pending));
                    let why = match outcome {
                        Err(e) => chain(&e),
                        Ok(_) => "a gathered job answered without running".into(),
                    };
                    fail(waiting.into_iter().map(|w| w.answer), &why);
                }
            }
        });
    }
}

/// Tells every write of a job that failed as a whole (or never ran) that it
/// did not commit, and why.
fn fail<O, E>(answers: impl IntoIterator<Item = oneshot::Sender<Result<O, E>>>, why: &str)
where
    E: From<BatchFailed>,
{
    for answer in answers {
        let _ = answer.send(Err(BatchFailed(why.to_owned()).into()));
    }
}

/// An error and its sources, as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        line = format!("{line}: {cause}");
        source = cause.source();
    }
    line
}

/// The lock's data even if a holder panicked: the vector it guards is
/// consistent between pushes and takes.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
