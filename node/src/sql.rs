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

// The predicates of `idempotency_requests`' partial indexes, written once,
// verbatim as the migrations have them, and the guard a keyed write spells
// instead. Macros, defined before the table files that use them, so that
// `concat!` can build their queries as constants.

/// The states an owner works in: the predicate of
/// `idempotency_requests_unfinished`. A round query that wants the index
/// must spell it out ([`once_db::RoundQuery`]). `unfinished!("r.")` names
/// the column of the table aliased `r`.
macro_rules! unfinished {
    () => {
        unfinished!("")
    };
    ($table:literal) => {
        concat!(
            $table,
            "status IN ('IN_PROGRESS', 'UNKNOWN_REQUIRES_RECOVERY')"
        )
    };
}

/// A keyed write's guard on the one record its key found: `guard IS TRUE`,
/// which holds exactly when `guard` does, but from which PostgreSQL cannot
/// prove a partial index's predicate. Spelled as a bare `status IN (…)`
/// next to the key, the guard lets the planner reach the record through
/// `idempotency_requests_unfinished` instead of the primary key, and it
/// does whenever the statistics say few records are unfinished (every busy
/// table): a scan of every unfinished record, and of every entry a finish
/// left behind until the next vacuum. Measured under load: a batch's finish
/// at 3.3 ms a statement through that index, against 0.8 ms for its claim
/// (`bash bench/pg-statements.sh`, decision 0069). `tests/api/query_plans.rs`
/// checks every keyed write's plan ([`keyed_writes`]).
macro_rules! on_the_keyed_row {
    ($guard:expr) => {
        concat!("(", $guard, ") IS TRUE")
    };
}

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

/// Every write that finds its record by key, guarded by the record's
/// state: each must reach its rows through `idempotency_requests_pkey`,
/// whatever the statistics say (`on_the_keyed_row!`).
pub fn keyed_writes() -> Vec<RoundQuery> {
    let mut all = records::keyed_writes();
    all.push(hot_writes::keyed_write());
    all.push(gathered_writes::keyed_write());
    all
}

/// Every query a background loop of the store sends each round: the
/// recovery worker's, the sweeper's, the metrics scrape's, the settling
/// pass's.
pub fn round_queries() -> Vec<RoundQuery> {
    let mut all = records::round_queries();
    all.extend(payments::round_queries());
    all
}
