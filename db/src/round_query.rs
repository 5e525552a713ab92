//! The queries a background loop sends every round (a publisher's, a
//! sender's, a sweeper's, a metrics scrape's), each named with the index that
//! must serve it, so a round costs what it finds, not the size of its table.
//!
//! The trap this guards against: a partial index (`WHERE status =
//! 'PENDING'`) serves only a query whose own predicate implies the index's.
//! With the status bound as a parameter (`status = $1`), PostgreSQL's generic
//! plan, which it switches a prepared statement to after five runs when that
//! plan looks no dearer, cannot use the index: the email sender's round
//! walked the primary key past every email ever sent, 25 ms a round at
//! 200,000 sent and 110 ms at 1,000,000, against 0.01 ms through its index
//! (`bash bench/round-queries.sh`). So a round query spells its partial
//! index's predicate out, verbatim (SQLite matches terms; it does not reason
//! that `status = 'X'` implies `status IN ('X', 'Y')`). The test
//! `tests/api/query_plans.rs` checks each query's plan names its index, on
//! PostgreSQL's generic plan and on SQLite's plan made before any value is
//! bound (stricter than SQLite at run time, which may re-plan once values
//! are bound: the bound email query measured fast there).

/// A query sent every round, and the index whose name its plan must show.
/// (The store's keyed writes are checked the same way, against the primary
/// key: `once_node::sql::keyed_writes`.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundQuery {
    /// Who sends it, for the test's messages.
    pub name: &'static str,
    /// Exactly what is sent (parameters as `$1`, `$2` …).
    pub sql: String,
    pub index: &'static str,
}

impl RoundQuery {
    pub fn new(name: &'static str, sql: impl Into<String>, index: &'static str) -> Self {
        Self {
            name,
            sql: sql.into(),
            index,
        }
    }
}
