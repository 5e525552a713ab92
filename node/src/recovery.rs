//! The recovery worker: every node looks for operations nobody is finishing
//! — `IN_PROGRESS` records whose owner's lease ran out (a crash, a kill, a
//! lost region) and `UNKNOWN_REQUIRES_RECOVERY` records whose backoff
//! passed — takes each over with a fenced compare-and-set, and finishes it
//! from its recorded step (`engine::execute::recover`): the provider is
//! asked by key before anything is charged (I5).
//!
//! Several nodes may run it against one database: the takeover decides who
//! recovers a record, the others skip it. When the provider still cannot
//! answer, the record goes back to `UNKNOWN_REQUIRES_RECOVERY` with a
//! backoff that doubles per attempt (at most five minutes).
//!
//! After each pass it runs the settling pass ([`crate::settling`]): rows a
//! finish left pending behind their finished records.

use futures::StreamExt;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::engine::execute::{Answer, recover};
use crate::settling::settle_due;
use crate::state::AppState;

/// How many records one pass recovers at once.
const CONCURRENCY: usize = 8;

/// One pass: takes over and finishes every due record (up to the batch).
/// Returns how many this node took over.
pub async fn recover_due(state: &AppState) -> anyhow::Result<usize> {
    let now = state.clock.now();
    let due = state
        .store
        .recovery
        .due_for_recovery(now, state.config.recovery_batch)
        .await?;
    if due.is_empty() {
        return Ok(0);
    }
    let taken = futures::stream::iter(due)
        .map(|seen| async move {
            let owned = match state
                .store
                .recovery
                .take_over(&seen, state.clock.now(), state.config.lease)
                .await
            {
                Ok(Some(owned)) => owned,
                Ok(None) => return 0,
                Err(e) => {
                    warn!(error = %format!("{e:#}"), "recovery takeover failed");
                    return 0;
                }
            };
            state.metrics.takeovers.inc();
            let key = owned.record.scope.key.clone();
            match recover(state, owned).await {
                Ok(Answer::Stored { response, .. }) => {
                    info!(%key, status = response.status, "recovered an operation")
                }
                Ok(Answer::Pending { retry_after, .. }) => {
                    info!(%key, ?retry_after, "provider outcome still unknown; will retry")
                }
                Err(e) => {
                    warn!(%key, error = %format!("{e:#}"), "recovery did not finish the operation")
                }
            }
            1
        })
        .buffer_unordered(CONCURRENCY)
        .fold(0, |n, taken| async move { n + taken })
        .await;
    Ok(taken)
}

/// Runs [`recover_due`] every `recovery_interval` until `shutdown` flips.
pub async fn run(state: AppState, mut shutdown: watch::Receiver<bool>) {
    // The first pass comes one interval after start, not at once: a
    // restarted node's own in-flight work is not "abandoned" yet anyway.
    let every = state.config.recovery_interval;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut settle_from = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        match recover_due(&state).await {
            Ok(0) => {}
            Ok(n) => debug!(n, "recovery pass took over records"),
            Err(e) => warn!(error = %format!("{e:#}"), "recovery pass failed; will retry"),
        }
        match settle_due(&state, &mut settle_from).await {
            Ok(0) => {}
            Ok(n) => debug!(n, "settling pass settled payments"),
            Err(e) => warn!(error = %format!("{e:#}"), "settling pass failed; will retry"),
        }
    }
}
