//! The replay-window sweeper: purges stored answers of records past their
//! window (keeping metadata for diagnosis), then deletes metadata past its
//! retention. It works in small batches, each its own short statement, so
//! it never holds locks long enough to stall traffic.
//!
//! Correctness does not depend on it: a record past its window is treated
//! as expired at request time whether or not the sweeper got to it.

use tokio::sync::watch;
use tracing::{debug, warn};

use crate::state::AppState;

/// One full pass: expire, then purge, batch after batch until caught up.
pub async fn sweep_once(state: &AppState) -> anyhow::Result<(u64, u64)> {
    let (mut expired, mut purged) = (0, 0);
    loop {
        let now = state.clock.now();
        let n = state
            .store
            .sweeper
            .expire_batch(
                now,
                state.config.metadata_retention,
                state.config.sweep_batch,
            )
            .await?;
        expired += n;
        state.metrics.expired_records.inc_by(n);
        if n < state.config.sweep_batch as u64 {
            break;
        }
        tokio::task::yield_now().await;
    }
    loop {
        let n = state
            .store
            .sweeper
            .purge_batch(state.clock.now(), state.config.sweep_batch)
            .await?;
        purged += n;
        state.metrics.purged_records.inc_by(n);
        if n < state.config.sweep_batch as u64 {
            break;
        }
        tokio::task::yield_now().await;
    }
    Ok((expired, purged))
}

/// Runs [`sweep_once`] every `sweep_interval` until `shutdown` flips.
pub async fn run(state: AppState, mut shutdown: watch::Receiver<bool>) {
    // The first pass comes one interval after start, not at once: a
    // restarted node's own in-flight work is not "abandoned" yet anyway.
    let every = state.config.sweep_interval;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        match sweep_once(&state).await {
            Ok((expired, purged)) => debug!(expired, purged, "swept idempotency records"),
            Err(e) => warn!(error = %format!("{e:#}"), "sweep failed; will retry"),
        }
    }
}
