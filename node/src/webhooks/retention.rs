//! How long webhook state is kept: 30 days of events (what `GET /events`
//! lists), then each event and its deliveries are deleted once nothing
//! about them is still owed. An event with a delivery still `PENDING`
//! (retrying, or redriven) or `DEAD` (a dead letter an operator may
//! redrive) is kept whatever its age; one whose deliveries all ended
//! (`DELIVERED`, `CANCELLED`) goes. Pruned in small batches, each its own
//! short transaction, so it never holds the database long.

use once_db::Database;

use super::deliveries::{DEAD, PENDING};
use crate::domain::UnixMillis;

/// Days of events kept and listed by `GET /events`.
pub const EVENTS_RETENTION_DAYS: i64 = 30;

/// Events pruned per transaction.
const BATCH: i64 = 500;

/// The oldest creation time still kept at `now`.
pub fn kept_since(now: UnixMillis) -> UnixMillis {
    UnixMillis(now.0 - EVENTS_RETENTION_DAYS * 86_400_000)
}

/// Deletes every event older than the retention whose deliveries all
/// ended, with those deliveries, batch after batch; returns how many
/// events went.
pub async fn prune(db: &Database, now: UnixMillis) -> anyhow::Result<u64> {
    let before = kept_since(now).0;
    let mut pruned = 0;
    loop {
        let mut tx = db.pool.begin().await?;
        // Fanned out (no delivery can be added to it any more) and owing
        // nothing.
        let done = "SELECT event_id FROM webhook_events e \
             WHERE e.created_at < $1 AND e.fanned_out_at IS NOT NULL \
               AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d \
                               WHERE d.event_id = e.event_id AND d.status IN ($2, $3)) \
             ORDER BY e.seq LIMIT $4";
        sqlx::query(&format!(
            "DELETE FROM webhook_deliveries WHERE event_id IN ({done})"
        ))
        .bind(before)
        .bind(PENDING)
        .bind(DEAD)
        .bind(BATCH)
        .execute(&mut *tx)
        .await?;
        let events = sqlx::query(&format!(
            "DELETE FROM webhook_events WHERE event_id IN ({done})"
        ))
        .bind(before)
        .bind(PENDING)
        .bind(DEAD)
        .bind(BATCH)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        pruned += events;
        if events < BATCH as u64 {
            return Ok(pruned);
        }
        tokio::task::yield_now().await;
    }
}
