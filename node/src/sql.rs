//! The `sql` store mode: idempotency records, payments and outbox rows in the
//! regional database, SQLite (embedded default) or PostgreSQL.
//!
//! One set of queries serves both dialects through sqlx's `Any` driver:
//! placeholders are `$n`, times and integers are `BIGINT`, and the few
//! dialect differences are branches on [`Dialect`]. Each table's queries live
//! in its own file and take a connection, so the transaction boundary is
//! chosen by the caller ([`SqlStore`]).
//!
//! The database itself (connect, dialect, write gate, migrations) is the
//! `once-db` crate's, shared with the event path; it is re-exported here.

mod finish;
mod gathered_writes;
mod hot_writes;
mod materialize;
mod outbox;
mod payments;
mod records;
mod store;

pub use materialize::Materialized;
pub use once_db::{Database, Dialect, RoundQuery, group_commit};
pub use store::SqlStore;

use crate::store::StoreError;

/// Whether the regional database answers a trivial query within `within`:
/// what readiness asks of it in both store modes.
pub async fn answers_within(db: &Database, within: std::time::Duration) -> Result<(), StoreError> {
    tokio::time::timeout(within, sqlx::query("SELECT 1").execute(&db.pool))
        .await
        .map_err(|_| {
            StoreError::Unavailable(anyhow::anyhow!("the database did not answer in {within:?}"))
        })?
        .map_err(|e| StoreError::Unavailable(e.into()))?;
    Ok(())
}

/// Every query a background loop of the store sends each round: the
/// recovery worker's, the sweeper's, the metrics scrape's, the settling
/// pass's.
pub fn round_queries() -> Vec<RoundQuery> {
    let mut all = records::round_queries();
    all.extend(payments::round_queries());
    all
}
