//! The re-encryption worker (docs/decisions/0031-encryption-at-rest.md):
//! picks up a changed data key file (`once keys rotate` appends the new
//! sealing key) and re-seals, under the newest key, every record an older
//! key still seals, in small batches, like the sweeper. Each rewrite is a
//! compare-and-set on what it read, so it never races an owner's write.
//! When `idempotency_sealed_stale_records` reads 0 (or `GET /admin/keys`
//! says `stale: 0`), the older keys may be removed from the file.
//!
//! Correctness does not depend on it: every listed key opens what it
//! sealed, so replays are byte-identical before, during and after a pass.

use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::state::AppState;

/// One pass: batch after batch until a batch rewrites fewer than it asked
/// for; then the count of records still under older keys. Returns how
/// many it re-sealed.
pub async fn reseal_once(state: &AppState) -> anyhow::Result<u64> {
    let batch = state.config.sweep_batch;
    let mut resealed = 0;
    loop {
        let n = state
            .store
            .reencryption
            .reseal_batch(state.clock.now(), batch)
            .await?;
        resealed += n;
        state.metrics.resealed_records.inc_by(n);
        if n < batch as u64 {
            break;
        }
        tokio::task::yield_now().await;
    }
    let count = state.store.reencryption.sealed_count().await?;
    state
        .metrics
        .sealed_stale_records
        .set(i64::try_from(count.stale).unwrap_or(i64::MAX));
    Ok(resealed)
}

/// Every `key_poll_interval`: re-read the key file if it changed, and,
/// when `reseal` (the recovery role), run a pass while anything is sealed
/// under an older key. Every role reloads: the API seals with the newest key.
pub async fn run(state: AppState, mut shutdown: watch::Receiver<bool>, reseal: bool) {
    let every = state.config.key_poll_interval;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Unknown until the first pass has counted.
    let mut stale = true;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let reloaded = state.data_keys.reload_if_changed().unwrap_or(false);
        if !reseal || !(reloaded || stale) {
            continue;
        }
        match reseal_once(&state).await {
            Ok(n) => {
                stale = state.metrics.sealed_stale_records.get() > 0;
                if n > 0 {
                    info!(
                        resealed = n,
                        sealing_key = state.data_keys.ring().sealing_key_id(),
                        "re-sealed records under the newest data key"
                    );
                } else {
                    debug!("nothing to re-seal");
                }
            }
            Err(e) => warn!(error = %format!("{e:#}"), "re-encryption failed; will retry"),
        }
    }
}
