//! Every query a background loop sends each round (publisher, email sender,
//! redriver, recovery worker, sweeper, metrics scrape) is served by the
//! index it names (`once_db::RoundQuery`), on both dialects: PostgreSQL's
//! generic plan (what a prepared statement may run with from its sixth
//! execution on) and SQLite's plan with every parameter NULL. A status
//! bound as a parameter fails this on PostgreSQL: the generic plan cannot use
//! a partial index on that status, and the round reads the table (seen: the
//! email sender's round at 110 ms over 1,000,000 sent emails, against
//! 0.01 ms through its index; `bench/round-queries.sh`).
//!
//! And every write that finds its record by key and is guarded by the
//! record's state (`once_node::sql::keyed_writes`) reaches it through the
//! primary key on PostgreSQL, on a table whose statistics say almost no
//! record is unfinished (every busy table between two ANALYZEs). Spelled as
//! a bare `status IN (…)`, such a guard let the generic plan scan
//! `idempotency_requests_unfinished` (and every entry finishes left in it)
//! instead: 3.3 ms a batch's finish under load (decision 0069).

use sqlx::{Connection, Executor, Row};

use crate::helpers::*;
use crate::{on_backends, on_sql_backends};

on_sql_backends!(every_round_query_is_served_by_its_index);
on_backends!([postgres] every_keyed_write_reaches_its_record_by_primary_key);

fn round_queries() -> Vec<once_node::sql::RoundQuery> {
    let mut all = once_node::sql::round_queries();
    all.extend(once_node::events::round_queries());
    all
}

/// The highest `$n` in `sql`: how many parameters it takes.
fn parameters(sql: &str) -> usize {
    let mut highest = 0;
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        rest = &rest[at + 1..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        highest = highest.max(digits.parse().unwrap_or(0));
    }
    highest
}

async fn every_round_query_is_served_by_its_index(backend: Backend) {
    let db = TestDb::new(backend).await;
    db.pool().await.migrate().await.expect("migrations");
    for query in round_queries() {
        let plan = match backend {
            Backend::Postgres => postgres_generic_plan(&db.url, &query.sql).await,
            _ => sqlite_plan(&db.url, &query.sql).await,
        };
        assert!(
            plan.contains(query.index),
            "{}: planned without {} on {backend:?}:\n{}\n{plan}",
            query.name,
            query.index,
            query.sql
        );
    }
}

async fn every_keyed_write_reaches_its_record_by_primary_key(backend: Backend) {
    let db = TestDb::new(backend).await;
    db.pool().await.migrate().await.expect("migrations");
    // Two thousand finished records and statistics that know it.
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    conn.execute(
        "INSERT INTO idempotency_requests (tenant_id, principal_id, operation, idempotency_key, \
           fingerprint, fingerprint_version, status, step, fence, locked_until, region, created_at, \
           updated_at, expires_at) \
         SELECT 't', 'p', 'payments.create', 'key-' || n, 'f', 1, 'COMPLETED', 'COMPLETED', 1, 0, \
           'r', 0, 0, 86400000 FROM generate_series(1, 2000) AS n; \
         ANALYZE idempotency_requests",
    )
    .await
    .unwrap();
    let partial = [
        "idempotency_requests_unfinished",
        "idempotency_requests_expiry",
        "idempotency_requests_purge",
    ];
    for write in once_node::sql::keyed_writes() {
        let plan = postgres_generic_plan(&db.url, &write.sql).await;
        assert!(
            plan.contains(write.index) && !partial.iter().any(|index| plan.contains(index)),
            "{}: not planned by {} alone:\n{}\n{plan}",
            write.name,
            write.index,
            write.sql
        );
    }
}

/// The plan PostgreSQL keeps for `sql` once it is prepared and generic.
/// Sequential scans are priced out, so an empty table does not make one
/// look cheaper than the index a full table needs.
async fn postgres_generic_plan(url: &str, sql: &str) -> String {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    conn.execute("SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off")
        .await
        .unwrap();
    conn.execute(format!("PREPARE round AS {sql}").as_str())
        .await
        .unwrap();
    let nulls = vec!["NULL"; parameters(sql)].join(", ");
    let execute = if nulls.is_empty() {
        "EXPLAIN EXECUTE round".to_owned()
    } else {
        format!("EXPLAIN EXECUTE round({nulls})")
    };
    let rows = sqlx::query(&execute).fetch_all(&mut conn).await.unwrap();
    rows.iter()
        .map(|r| r.get::<String, _>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// SQLite's query plan for `sql`, every parameter NULL: no value that could
/// satisfy a partial index's predicate (SQLite may re-plan once a matching
/// value is bound, so this is the stricter check).
async fn sqlite_plan(url: &str, sql: &str) -> String {
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{url}"))
        .await
        .unwrap();
    let explain_sql = format!("EXPLAIN QUERY PLAN {sql}");
    let mut explain = sqlx::query(&explain_sql);
    for _ in 0..parameters(sql) {
        explain = explain.bind(None::<i64>);
    }
    let rows = explain.fetch_all(&mut conn).await.unwrap();
    rows.iter()
        .map(|r| r.get::<String, _>("detail"))
        .collect::<Vec<_>>()
        .join("\n")
}
