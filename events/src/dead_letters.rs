//! `dead_letters`: messages a consumer gave up on, with their last error.
//!
//! Parking a message writes the letter and an inbox row `DEAD_LETTERED` in
//! one transaction, so a later duplicate delivery of the same message is
//! acknowledged untouched instead of failing again. An operator lists the
//! letters (`once events dead-letters`) and, once the cause is fixed, asks
//! for a redrive (`once events redrive ID`): that only flips the letter to
//! `REDRIVE_REQUESTED` in the database; the node's redriver runs the stored
//! message through the consumer again (see `ConsumerRunner::redrive`).
//! Redriving through the database rather than re-publishing works with
//! either broker, and is not swallowed by JetStream's duplicate window.
//!
//! Statuses: `DEAD` → `REDRIVE_REQUESTED` → `REDRIVEN` (or back to `DEAD`
//! with the new error).

use once_db::Database;
use once_domain::UnixMillis;
use serde::Serialize;
use sqlx::{Any, Executor, Row};

use crate::inbox;

pub const DEAD: &str = "DEAD";
pub const REDRIVE_REQUESTED: &str = "REDRIVE_REQUESTED";
pub const REDRIVEN: &str = "REDRIVEN";

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    pub id: i64,
    pub consumer_name: String,
    pub message_id: String,
    pub event_type: String,
    /// The message body as received.
    pub message: String,
    pub attempts: i64,
    pub last_error: String,
    pub status: String,
    pub created_at: i64,
    pub redrive_requested_at: Option<i64>,
    pub redriven_at: Option<i64>,
}

impl DeadLetter {
    pub fn new(
        consumer: &str,
        message_id: &str,
        event_type: &str,
        message: &str,
        attempts: i64,
        last_error: &str,
        now: UnixMillis,
    ) -> Self {
        Self {
            id: 0,
            consumer_name: consumer.to_owned(),
            message_id: message_id.to_owned(),
            event_type: event_type.to_owned(),
            message: message.to_owned(),
            attempts,
            last_error: last_error.to_owned(),
            status: DEAD.to_owned(),
            created_at: now.0,
            redrive_requested_at: None,
            redriven_at: None,
        }
    }
}

const COLUMNS: &str = "id, consumer_name, message_id, event_type, message, attempts, last_error, status, created_at, redrive_requested_at, redriven_at";

fn letter_of(row: &sqlx::any::AnyRow) -> Result<DeadLetter, sqlx::Error> {
    Ok(DeadLetter {
        id: row.try_get("id")?,
        consumer_name: row.try_get("consumer_name")?,
        message_id: row.try_get("message_id")?,
        event_type: row.try_get("event_type")?,
        message: row.try_get("message")?,
        attempts: row.try_get("attempts")?,
        last_error: row.try_get("last_error")?,
        status: row.try_get("status")?,
        created_at: row.try_get("created_at")?,
        redrive_requested_at: row.try_get("redrive_requested_at")?,
        redriven_at: row.try_get("redriven_at")?,
    })
}

/// Parks a message: the letter and the inbox row, in one transaction. If the
/// inbox already has the message (another instance finished it meanwhile),
/// nothing is parked.
pub async fn park(db: &Database, letter: &DeadLetter, error_code: &str) -> Result<(), sqlx::Error> {
    let mut tx = db.pool.begin().await?;
    let now = UnixMillis(letter.created_at);
    if inbox::record(
        &mut *tx,
        &letter.consumer_name,
        &letter.message_id,
        inbox::DEAD_LETTERED,
        Some(error_code),
        now,
    )
    .await?
    {
        // A letter left from an earlier parking of the same message (its
        // redrive failed) takes the new error.
        sqlx::query(
            "INSERT INTO dead_letters (consumer_name, message_id, event_type, message, attempts, last_error, status, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (consumer_name, message_id) DO UPDATE SET \
               attempts = excluded.attempts, last_error = excluded.last_error, status = excluded.status",
        )
        .bind(&letter.consumer_name)
        .bind(&letter.message_id)
        .bind(&letter.event_type)
        .bind(&letter.message)
        .bind(letter.attempts)
        .bind(&letter.last_error)
        .bind(DEAD)
        .bind(letter.created_at)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

/// Every letter, newest first (all consumers, or one).
pub async fn list(db: &Database, consumer: Option<&str>) -> Result<Vec<DeadLetter>, sqlx::Error> {
    let rows = match consumer {
        Some(name) => {
            sqlx::query(&format!(
                "SELECT {COLUMNS} FROM dead_letters WHERE consumer_name = $1 ORDER BY id DESC"
            ))
            .bind(name)
            .fetch_all(&db.pool)
            .await?
        }
        None => {
            sqlx::query(&format!(
                "SELECT {COLUMNS} FROM dead_letters ORDER BY id DESC"
            ))
            .fetch_all(&db.pool)
            .await?
        }
    };
    rows.iter().map(letter_of).collect()
}

pub async fn get(db: &Database, id: i64) -> Result<Option<DeadLetter>, sqlx::Error> {
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM dead_letters WHERE id = $1"))
        .bind(id)
        .fetch_optional(&db.pool)
        .await?;
    row.as_ref().map(letter_of).transpose()
}

/// Asks the nodes to run letter `id` again. False if it is not `DEAD`
/// (unknown, already requested, or already redriven).
pub async fn request_redrive(db: &Database, id: i64, now: UnixMillis) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE dead_letters SET status = $1, redrive_requested_at = $2 WHERE id = $3 AND status = $4",
    )
    .bind(REDRIVE_REQUESTED)
    .bind(now.0)
    .bind(id)
    .bind(DEAD)
    .execute(&db.pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// A round of a consumer's redriver: its letters an operator asked to run
/// again, read through the partial index on them (the status spelled out,
/// not bound: see [`once_db::RoundQuery`]).
pub fn select_redrive_requested() -> String {
    format!(
        "SELECT {COLUMNS} FROM dead_letters WHERE status = '{REDRIVE_REQUESTED}' AND consumer_name = $1 \
         ORDER BY id LIMIT 100"
    )
}

pub async fn redrive_requested(
    db: &Database,
    consumer: &str,
) -> Result<Vec<DeadLetter>, sqlx::Error> {
    let rows = sqlx::query(&select_redrive_requested())
        .bind(consumer)
        .fetch_all(&db.pool)
        .await?;
    rows.iter().map(letter_of).collect()
}

pub async fn mark_redriven<'e>(
    db: impl Executor<'e, Database = Any>,
    id: i64,
    now: UnixMillis,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE dead_letters SET status = $1, redriven_at = $2 WHERE id = $3")
        .bind(REDRIVEN)
        .bind(now.0)
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

pub async fn redrive_failed(db: &Database, id: i64, error: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE dead_letters SET status = $1, last_error = $2, attempts = attempts + 1 WHERE id = $3 AND status = $4",
    )
    .bind(DEAD)
    .bind(error)
    .bind(id)
    .bind(REDRIVE_REQUESTED)
    .execute(&db.pool)
    .await?;
    Ok(())
}
