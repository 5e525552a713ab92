//! The outbox publisher: reads unpublished outbox rows in `seq` order,
//! publishes each under its event id, then marks them published.
//!
//! Safe with several replicas on one PostgreSQL database: a round claims its
//! rows with `FOR UPDATE SKIP LOCKED` inside a transaction that lasts until
//! they are marked, so two publishers never hold the same row, and a
//! publisher that dies releases its rows (the transaction rolls back) for
//! another to publish again. On SQLite (one node per database file) there is
//! one publisher, no transaction is held across the publish, and the mark is
//! a job of the group commit (decision 0037).
//!
//! Safe across restarts: a row is marked only after the broker stored the
//! event, so a crash in between publishes it again on restart, under the same
//! event id — dropped by JetStream's duplicate window, and in any case by the
//! consumers' inboxes.
//!
//! Order: rows are published in `seq` order within a round and rounds follow
//! each other. Across replicas, or when a payment's transaction commits after
//! one with a higher `seq`, events can arrive out of order; consumers do not
//! depend on order (each effect is keyed by its payment).

use std::sync::Arc;

use once_db::{Database, Dialect};
use once_domain::{Clock, UnixMillis};
use once_failpoints::crash_point;
use sqlx::Row;
use tokio::sync::watch;
use tracing::{debug, instrument, warn};

use crate::broker::Broker;
use crate::config::EventsConfig;
use crate::message::EventMessage;
use crate::metrics::EventMetrics;
use crate::placeholders;

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("outbox query failed")]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Broker(#[from] crate::broker::BrokerError),
    /// The mark's group commit batch did not commit: published, not
    /// marked, so the next round publishes the rows again.
    #[error(transparent)]
    NotCommitted(#[from] once_db::BatchFailed),
    #[error("outbox row {seq} has a payload that is not JSON")]
    Corrupt {
        seq: i64,
        #[source]
        source: serde_json::Error,
    },
}

/// One outbox row, claimed for publishing.
#[derive(Debug)]
struct Pending {
    seq: i64,
    created_at: i64,
    message: EventMessage,
}

#[derive(Debug, Clone)]
pub struct Publisher {
    db: Database,
    broker: Arc<dyn Broker>,
    clock: Arc<dyn Clock>,
    metrics: EventMetrics,
    batch: i64,
}

/// A round of the publisher, through the partial index on unpublished rows.
pub const SELECT_UNPUBLISHED: &str = "SELECT seq, event_id, event_type, schema_version, aggregate_id, tenant_id, payload, created_at, traceparent \
     FROM outbox WHERE published_at IS NULL ORDER BY seq LIMIT $1";

/// The backlog gauges' sample (every second), through the same index.
pub const SELECT_BACKLOG: &str =
    "SELECT COUNT(*), COALESCE(MIN(created_at), 0) FROM outbox WHERE published_at IS NULL";

impl Publisher {
    pub fn new(
        db: Database,
        broker: Arc<dyn Broker>,
        clock: Arc<dyn Clock>,
        metrics: EventMetrics,
        config: &EventsConfig,
    ) -> Self {
        Self {
            db,
            broker,
            clock,
            metrics,
            batch: config.publish_batch,
        }
    }

    /// Publishes one round (up to `batch` rows). Returns how many rows it
    /// published; 0 when the outbox is empty (or every row is claimed by
    /// another replica).
    #[instrument(name = "publish a round of outbox events", skip_all, fields(broker = self.broker.kind()))]
    pub async fn publish_round(&self) -> Result<usize, PublishError> {
        match self.db.dialect {
            Dialect::Postgres => {
                let mut tx = self.db.pool.begin().await?;
                let sql = format!("{SELECT_UNPUBLISHED} FOR UPDATE SKIP LOCKED");
                let rows = sqlx::query(&sql)
                    .bind(self.batch)
                    .fetch_all(&mut *tx)
                    .await?;
                let pending = decode(rows)?;
                if pending.is_empty() {
                    tx.rollback().await?;
                    return Ok(0);
                }
                self.publish(&pending).await?;
                mark(&mut tx, &seqs_of(&pending), self.clock.now()).await?;
                tx.commit().await?;
                Ok(pending.len())
            }
            Dialect::Sqlite => {
                let rows = sqlx::query(SELECT_UNPUBLISHED)
                    .bind(self.batch)
                    .fetch_all(&self.db.pool)
                    .await?;
                let pending = decode(rows)?;
                if pending.is_empty() {
                    return Ok(0);
                }
                self.publish(&pending).await?;
                // A job of the group commit: the mark shares a commit with
                // the request path's writes instead of paying its own.
                let (seqs, now) = (seqs_of(&pending), self.clock.now());
                self.db
                    .batches()
                    .run(Box::new(move |conn| {
                        Box::pin(async move { mark(conn, &seqs, now).await })
                    }))
                    .await?;
                Ok(pending.len())
            }
        }
    }

    async fn publish(&self, pending: &[Pending]) -> Result<(), PublishError> {
        let batch: Vec<EventMessage> = pending.iter().map(|p| p.message.clone()).collect();
        self.broker.publish(&batch).await?;
        let now = self.clock.now().0;
        for p in pending {
            self.metrics
                .publish_lag
                .observe((now - p.created_at).max(0) as f64 / 1000.0);
        }
        self.metrics.published.inc_by(pending.len() as u64);
        // The crash the publisher must survive: published, not yet marked.
        crash_point("after_publish");
        Ok(())
    }

    /// Samples the backlog gauges: unpublished rows and the oldest one's age.
    pub async fn sample_backlog(&self) -> Result<(), PublishError> {
        let row = sqlx::query(SELECT_BACKLOG).fetch_one(&self.db.pool).await?;
        let (count, oldest): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        self.metrics.outbox_backlog.set(count);
        let age = if count == 0 {
            0.0
        } else {
            (self.clock.now().0 - oldest).max(0) as f64 / 1000.0
        };
        self.metrics.outbox_oldest_age.set(age);
        Ok(())
    }

    /// Publishes until `shutdown` flips: round after round while there is
    /// work, then every `interval`.
    pub async fn run(self, interval: std::time::Duration, mut shutdown: watch::Receiver<bool>) {
        let mut last_sample = tokio::time::Instant::now() - std::time::Duration::from_secs(60);
        loop {
            // Cancelling a round is safe: an unmarked row is published again.
            let round = tokio::select! {
                r = self.publish_round() => r,
                _ = shutdown.changed() => return,
            };
            let published = match round {
                Ok(n) => n,
                Err(e) => {
                    self.metrics.publish_failures.inc();
                    warn!(error = %error_chain(&e), "publishing outbox events failed; will retry");
                    0
                }
            };
            if last_sample.elapsed() >= std::time::Duration::from_secs(1) {
                if let Err(e) = self.sample_backlog().await {
                    debug!(error = %error_chain(&e), "sampling the outbox backlog failed");
                }
                last_sample = tokio::time::Instant::now();
            }
            if *shutdown.borrow() {
                return;
            }
            if published as i64 >= self.batch {
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}

fn seqs_of(pending: &[Pending]) -> Vec<i64> {
    pending.iter().map(|p| p.seq).collect()
}

/// Marks the rows `seqs` published, in one statement.
async fn mark(
    conn: &mut sqlx::AnyConnection,
    seqs: &[i64],
    now: UnixMillis,
) -> Result<(), PublishError> {
    let sql = format!(
        "UPDATE outbox SET published_at = $1 WHERE published_at IS NULL AND seq IN ({})",
        placeholders::list(2, seqs.len())
    );
    let mut query = sqlx::query(&sql).bind(now.0);
    for seq in seqs {
        query = query.bind(*seq);
    }
    query.execute(&mut *conn).await?;
    Ok(())
}

fn decode(rows: Vec<sqlx::any::AnyRow>) -> Result<Vec<Pending>, PublishError> {
    rows.into_iter()
        .map(|row| {
            let seq: i64 = row.try_get("seq")?;
            let payload: String = row.try_get("payload")?;
            let data = serde_json::from_str(&payload)
                .map_err(|source| PublishError::Corrupt { seq, source })?;
            let created_at: i64 = row.try_get("created_at")?;
            let schema_version: i64 = row.try_get("schema_version")?;
            Ok(Pending {
                seq,
                created_at,
                message: EventMessage {
                    event_id: row.try_get("event_id")?,
                    event_type: row.try_get("event_type")?,
                    schema_version: i32::try_from(schema_version).unwrap_or(i32::MAX),
                    aggregate_id: row.try_get("aggregate_id")?,
                    tenant_id: row.try_get("tenant_id")?,
                    occurred_at: created_at,
                    data,
                    traceparent: row.try_get("traceparent")?,
                },
            })
        })
        .collect()
}

/// An error with its causes, for logs.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}
