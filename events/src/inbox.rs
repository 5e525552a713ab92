//! `consumer_inbox`: which messages each consumer has finished with.
//!
//! The row is written first, in the transaction that writes the consumer's
//! effect: of two instances racing on one message, the second blocks on the
//! unique key `(consumer_name, message_id)` until the first commits, then
//! finds the row and does nothing. A rolled-back attempt leaves no row.

use std::collections::HashSet;

use once_domain::UnixMillis;
use sqlx::{Any, Executor, Row};

use crate::placeholders;

/// The message's effect exists.
pub const PROCESSED: &str = "PROCESSED";
/// The message was parked in `dead_letters`; a redrive may process it.
pub const DEAD_LETTERED: &str = "DEAD_LETTERED";

/// Records `message_id` as finished by `consumer`. False when a row was
/// already there (a duplicate delivery).
pub async fn record<'e>(
    db: impl Executor<'e, Database = Any>,
    consumer: &str,
    message_id: &str,
    status: &str,
    error_code: Option<&str>,
    now: UnixMillis,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "INSERT INTO consumer_inbox (consumer_name, message_id, status, processed_at, error_code) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (consumer_name, message_id) DO NOTHING",
    )
    .bind(consumer)
    .bind(message_id)
    .bind(status)
    .bind(now.0)
    .bind(error_code)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Records `message_ids` as processed by `consumer`, in one statement,
/// behind `savepoint_move` (a group commit's, for a one-trip job: empty on
/// PostgreSQL, `once_db::group_commit`). Returns the ids that were new: a
/// duplicate delivery's row was there already, and an id given twice is new
/// once.
pub async fn record_processed<'e>(
    db: impl Executor<'e, Database = Any>,
    savepoint_move: &str,
    consumer: &str,
    message_ids: &[&str],
    now: UnixMillis,
) -> Result<HashSet<String>, sqlx::Error> {
    let sql = format!(
        "{savepoint_move}INSERT INTO consumer_inbox (consumer_name, message_id, status, processed_at) VALUES {} \
         ON CONFLICT (consumer_name, message_id) DO NOTHING RETURNING message_id",
        placeholders::rows(message_ids.len(), 4)
    );
    let mut query = sqlx::query(&sql);
    for id in message_ids {
        query = query.bind(consumer).bind(*id).bind(PROCESSED).bind(now.0);
    }
    query
        .fetch_all(db)
        .await?
        .iter()
        .map(|row| row.try_get(0))
        .collect()
}

/// Turns a dead-lettered row into a processed one (the redrive's effect is
/// being written in the same transaction). False if it was not dead-lettered
/// any more, e.g. another node's redrive got there first.
pub async fn revive<'e>(
    db: impl Executor<'e, Database = Any>,
    consumer: &str,
    message_id: &str,
    now: UnixMillis,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE consumer_inbox SET status = $1, processed_at = $2, error_code = NULL \
         WHERE consumer_name = $3 AND message_id = $4 AND status = $5",
    )
    .bind(PROCESSED)
    .bind(now.0)
    .bind(consumer)
    .bind(message_id)
    .bind(DEAD_LETTERED)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The status of `message_id` for `consumer`, if it has one.
pub async fn status<'e>(
    db: impl Executor<'e, Database = Any>,
    consumer: &str,
    message_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    let row = sqlx::query(
        "SELECT status FROM consumer_inbox WHERE consumer_name = $1 AND message_id = $2",
    )
    .bind(consumer)
    .bind(message_id)
    .fetch_optional(db)
    .await?;
    row.map(|r| r.try_get(0)).transpose()
}
