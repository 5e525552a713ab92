//! `webhook_deliveries`: one row per (event, endpoint), and every step of
//! its life (decision 0091).
//!
//! - Fan-out: each `webhook_events` row not yet fanned out gets a delivery
//!   per endpoint of its tenant that asked for its type and existed when it
//!   was written; the rows and the mark in one transaction, the rows behind
//!   `UNIQUE (event_id, endpoint_id)`, so a fan-out repeated by a crash or
//!   by a second node adds nothing.
//! - Claim: a due `PENDING` delivery is taken by moving `next_attempt_at`
//!   one lease ahead and writing a fresh `lease_token` (`FOR UPDATE SKIP
//!   LOCKED` on PostgreSQL, so two nodes never take the same one). A node
//!   that dies mid-attempt leaves it due again once the lease has passed.
//! - Outcome: written only while the token is still the claim's, so an
//!   attempt that outlived its lease (and was taken over) changes nothing.
//!   The receiver may then see the event twice, under one event id.
//! - Dead letter: a delivery out of budget is `DEAD` and gets a letter in
//!   the events crate's `dead_letters` (consumer [`DEAD_LETTER_CONSUMER`]),
//!   in one transaction; `once events redrive ID` makes it `PENDING` again
//!   with a fresh budget.

use once_db::{Database, Dialect};
use once_events::dead_letters;
use serde::{Deserialize, Serialize};
use sqlx::Row;

use crate::domain::UnixMillis;

pub const PENDING: &str = "PENDING";
pub const DELIVERED: &str = "DELIVERED";
pub const DEAD: &str = "DEAD";
/// The endpoint was deleted before the event reached it.
pub const CANCELLED: &str = "CANCELLED";

/// The `consumer_name` of webhook deliveries' dead letters.
pub const DEAD_LETTER_CONSUMER: &str = "webhook_delivery";

/// Events fanned out per round.
const FAN_OUT_BATCH: i64 = 256;

/// A delivery claimed for one attempt, with the event it carries.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: i64,
    pub endpoint_id: String,
    pub attempts: i64,
    pub retry_since: i64,
    pub lease_token: String,
    pub event: StoredEvent,
}

/// A `webhook_events` row.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub event_id: String,
    pub event_type: String,
    pub data: String,
    pub created_at: UnixMillis,
}

impl StoredEvent {
    /// The event as a receiver (and `GET /events`) sees it. The same bytes
    /// on every attempt: the signature of a retry signs the same body.
    pub fn render(&self) -> Vec<u8> {
        let created = crate::payments::response::rfc3339(self.created_at);
        // `data` is stored as the JSON the outbox holds; embedded as it is.
        format!(
            "{{\"object\":\"event\",\"id\":{},\"type\":{},\"createdAt\":{},\"data\":{}}}",
            serde_json::Value::from(self.event_id.as_str()),
            serde_json::Value::from(self.event_type.as_str()),
            serde_json::Value::from(created),
            self.data
        )
        .into_bytes()
    }
}

/// The letter's `message`: which delivery to make pending again.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LetterMessage {
    delivery_id: i64,
    event_id: String,
    endpoint_id: String,
}

/// Fans out one round of events; returns how many were fanned out.
pub async fn fan_out(db: &Database, now: UnixMillis) -> anyhow::Result<usize> {
    // On SQLite the transaction takes the write lock first: one that read
    // before writing could not upgrade while the group commit writes
    // (SQLITE_BUSY_SNAPSHOT), and would fail instead of waiting its turn.
    let (mut tx, lock) = match db.dialect {
        Dialect::Postgres => (db.pool.begin().await?, " FOR UPDATE SKIP LOCKED"),
        Dialect::Sqlite => (db.pool.begin_with("BEGIN IMMEDIATE").await?, ""),
    };
    let rows = sqlx::query(&format!(
        "SELECT seq, event_id, tenant_id, event_type, created_at FROM webhook_events \
         WHERE fanned_out_at IS NULL ORDER BY seq LIMIT $1{lock}"
    ))
    .bind(FAN_OUT_BATCH)
    .fetch_all(&mut *tx)
    .await?;
    if rows.is_empty() {
        tx.rollback().await?;
        return Ok(0);
    }
    let mut seqs = Vec::with_capacity(rows.len());
    for row in &rows {
        seqs.push(row.try_get::<i64, _>("seq")?);
        let event_id: String = row.try_get("event_id")?;
        let tenant: String = row.try_get("tenant_id")?;
        let event_type: String = row.try_get("event_type")?;
        let created_at: i64 = row.try_get("created_at")?;
        for endpoint in
            super::endpoints::matching(&mut tx, &tenant, &event_type, created_at).await?
        {
            sqlx::query(
                "INSERT INTO webhook_deliveries (event_id, endpoint_id, tenant_id, status, attempts, next_attempt_at, \
                 retry_since, created_at) VALUES ($1, $2, $3, $4, 0, $5, $5, $5) \
                 ON CONFLICT (event_id, endpoint_id) DO NOTHING",
            )
            .bind(&event_id)
            .bind(&endpoint)
            .bind(&tenant)
            .bind(PENDING)
            .bind(now.0)
            .execute(&mut *tx)
            .await?;
        }
    }
    let sql = format!(
        "UPDATE webhook_events SET fanned_out_at = $1 WHERE seq IN ({})",
        list(2, seqs.len())
    );
    let mut mark = sqlx::query(&sql).bind(now.0);
    for seq in &seqs {
        mark = mark.bind(*seq);
    }
    mark.execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(seqs.len())
}

fn list(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Claims up to `limit` due deliveries for `lease_until`, skipping the
/// endpoints in `saturated` (those with as many attempts in flight as
/// one endpoint may have here).
pub async fn claim(
    db: &Database,
    now: UnixMillis,
    lease_until: UnixMillis,
    limit: usize,
    saturated: &[String],
) -> anyhow::Result<Vec<Claimed>> {
    let token = uuid::Uuid::new_v4().simple().to_string();
    let lock = match db.dialect {
        Dialect::Postgres => " FOR UPDATE SKIP LOCKED",
        Dialect::Sqlite => "",
    };
    let skip = if saturated.is_empty() {
        String::new()
    } else {
        format!(" AND endpoint_id NOT IN ({})", list(6, saturated.len()))
    };
    let sql = format!(
        "UPDATE webhook_deliveries SET next_attempt_at = $1, lease_token = $2 WHERE id IN \
         (SELECT id FROM webhook_deliveries WHERE status = $3 AND next_attempt_at <= $4{skip} \
          ORDER BY next_attempt_at, id LIMIT $5{lock}) \
         RETURNING id, event_id, endpoint_id, attempts, retry_since"
    );
    let mut query = sqlx::query(&sql)
        .bind(lease_until.0)
        .bind(&token)
        .bind(PENDING)
        .bind(now.0)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX));
    for endpoint in saturated {
        query = query.bind(endpoint);
    }
    let rows = query.fetch_all(&db.pool).await?;
    let mut claimed = Vec::with_capacity(rows.len());
    for row in rows {
        let event_id: String = row.try_get("event_id")?;
        let Some(event) = event(db, &event_id).await? else {
            anyhow::bail!("delivery of {event_id} names an event that is not stored");
        };
        claimed.push(Claimed {
            id: row.try_get("id")?,
            endpoint_id: row.try_get("endpoint_id")?,
            attempts: row.try_get("attempts")?,
            retry_since: row.try_get("retry_since")?,
            lease_token: token.clone(),
            event,
        });
    }
    claimed.sort_by_key(|c| (c.event.created_at.0, c.id));
    Ok(claimed)
}

async fn event(db: &Database, event_id: &str) -> anyhow::Result<Option<StoredEvent>> {
    let row = sqlx::query(
        "SELECT event_id, event_type, data, created_at FROM webhook_events WHERE event_id = $1",
    )
    .bind(event_id)
    .fetch_optional(&db.pool)
    .await?;
    row.as_ref().map(event_of).transpose()
}

pub fn event_of(row: &sqlx::any::AnyRow) -> anyhow::Result<StoredEvent> {
    Ok(StoredEvent {
        event_id: row.try_get("event_id")?,
        event_type: row.try_get("event_type")?,
        data: row.try_get("data")?,
        created_at: UnixMillis(row.try_get("created_at")?),
    })
}

/// Hands a claimed delivery back unattempted, due again at `due` (its
/// endpoint already has its share of attempts in flight here).
pub async fn release(db: &Database, claimed: &Claimed, due: UnixMillis) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE webhook_deliveries SET next_attempt_at = $1, lease_token = NULL WHERE id = $2 AND lease_token = $3",
    )
    .bind(due.0)
    .bind(claimed.id)
    .bind(&claimed.lease_token)
    .execute(&db.pool)
    .await?;
    Ok(())
}

/// The endpoint answered 2xx.
pub async fn delivered(db: &Database, claimed: &Claimed, now: UnixMillis) -> anyhow::Result<()> {
    settle(db, claimed, DELIVERED, now.0, None, Some(now.0)).await
}

/// The endpoint is gone: no more attempts.
pub async fn cancelled(db: &Database, claimed: &Claimed, now: UnixMillis) -> anyhow::Result<()> {
    settle(
        db,
        claimed,
        CANCELLED,
        now.0,
        Some("endpoint deleted"),
        None,
    )
    .await
}

/// The attempt failed; the next one is at `next`.
pub async fn retry_at(
    db: &Database,
    claimed: &Claimed,
    next: UnixMillis,
    error: &str,
) -> anyhow::Result<()> {
    settle(db, claimed, PENDING, next.0, Some(error), None).await
}

async fn settle(
    db: &Database,
    claimed: &Claimed,
    status: &str,
    next: i64,
    error: Option<&str>,
    delivered_at: Option<i64>,
) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE webhook_deliveries SET status = $1, attempts = attempts + 1, next_attempt_at = $2, \
         last_error = $3, delivered_at = $4, lease_token = NULL WHERE id = $5 AND lease_token = $6",
    )
    .bind(status)
    .bind(next)
    .bind(error)
    .bind(delivered_at)
    .bind(claimed.id)
    .bind(&claimed.lease_token)
    .execute(&db.pool)
    .await?;
    Ok(())
}

/// The attempt failed and the budget is spent: `DEAD`, and a letter an
/// operator can redrive, in one transaction.
pub async fn dead_letter(
    db: &Database,
    claimed: &Claimed,
    error: &str,
    now: UnixMillis,
) -> anyhow::Result<()> {
    let mut tx = db.pool.begin().await?;
    let done = sqlx::query(
        "UPDATE webhook_deliveries SET status = $1, attempts = attempts + 1, last_error = $2, lease_token = NULL \
         WHERE id = $3 AND lease_token = $4",
    )
    .bind(DEAD)
    .bind(error)
    .bind(claimed.id)
    .bind(&claimed.lease_token)
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 1 {
        let message = serde_json::to_string(&LetterMessage {
            delivery_id: claimed.id,
            event_id: claimed.event.event_id.clone(),
            endpoint_id: claimed.endpoint_id.clone(),
        })?;
        // A letter left from an earlier dead-lettering (its redrive failed
        // again) takes the new error.
        sqlx::query(
            "INSERT INTO dead_letters (consumer_name, message_id, event_type, message, attempts, last_error, status, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (consumer_name, message_id) DO UPDATE SET \
               attempts = excluded.attempts, last_error = excluded.last_error, status = excluded.status",
        )
        .bind(DEAD_LETTER_CONSUMER)
        .bind(format!("{}/{}", claimed.event.event_id, claimed.endpoint_id))
        .bind(&claimed.event.event_type)
        .bind(message)
        .bind(claimed.attempts + 1)
        .bind(error)
        .bind(dead_letters::DEAD)
        .bind(now.0)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Makes every delivery an operator asked to redrive `PENDING` again, due
/// now, with a fresh budget; returns how many.
pub async fn redrive_requested(db: &Database, now: UnixMillis) -> anyhow::Result<usize> {
    let letters = dead_letters::redrive_requested(db, DEAD_LETTER_CONSUMER).await?;
    for letter in &letters {
        let message: LetterMessage = serde_json::from_str(&letter.message)?;
        let mut tx = db.pool.begin().await?;
        sqlx::query(
            "UPDATE webhook_deliveries SET status = $1, next_attempt_at = $2, retry_since = $2, lease_token = NULL \
             WHERE id = $3 AND status = $4",
        )
        .bind(PENDING)
        .bind(now.0)
        .bind(message.delivery_id)
        .bind(DEAD)
        .execute(&mut *tx)
        .await?;
        dead_letters::mark_redriven(&mut *tx, letter.id, now).await?;
        tx.commit().await?;
    }
    Ok(letters.len())
}
