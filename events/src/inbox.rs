//! `consumer_inbox`: which messages each consumer has finished with.
//!
//! The row is written with the consumer's effect, in one transaction (in one
//! query on the consumer's path: [`crate::effect`]): of two instances racing
//! on one message, the second waits on the first's rows (the unique keys)
//! until the first commits, then writes nothing. A rolled-back attempt leaves
//! no row.

use once_domain::UnixMillis;
use sqlx::{Any, Executor, Row};

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
