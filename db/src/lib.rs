//! The regional database: one pool on SQLite (embedded default) or
//! PostgreSQL, spoken to through sqlx's `Any` driver.
//!
//! This crate owns connecting and configuring it ([`Database::connect`]:
//! URL forms, SQLite's WAL, `synchronous = FULL` and busy timeout), the
//! [`Dialect`] the queries branch on, the SQLite write gate
//! ([`Database::writer`], decision 0007) and running the migrations
//! ([`Database::migrate`]), and the group commit writes go through
//! ([`Database::batches`], decision 0037) with its gathering of one kind's
//! writes into one job ([`Gatherer`], decision 0068), and the rule every round query of
//! a background loop keeps ([`RoundQuery`]). The migrations themselves stay in `/migrations`
//! at the workspace root, one schema in two dialects, embedded at build time.
//! The queries are not here: each lives with the code that owns its tables
//! (the node's `sql` module, the event path in `once-events`).

use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Once, OnceLock};
use std::time::Duration;

use anyhow::Context;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::Migrator;
use sqlx::{AnyPool, Executor};

pub mod gather;
pub mod group_commit;
mod round_query;

pub use gather::{GatherStats, Gatherer};
use group_commit::Gate;
pub use group_commit::{BatchFailed, GroupCommit};
pub use round_query::RoundQuery;

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/postgres");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// A pool on the regional database, the dialect it speaks, and (SQLite) the
/// gate this process's writers queue on. Clones share the pool and the gate.
#[derive(Debug, Clone)]
pub struct Database {
    pub pool: AnyPool,
    pub dialect: Dialect,
    /// SQLite has one writer. Queueing this process's writers here, in
    /// order, beats letting them collide in SQLite's busy handler, which
    /// backs off by sleeping (hundreds of milliseconds at the tail). Other
    /// processes on the same file, and other pools (`Database::connect`
    /// again), still meet the busy timeout. See decision 0007.
    write_gate: Gate,
    /// The group commit on this pool, started by the first
    /// [`Database::batches`]; clones share it.
    batches: Arc<OnceLock<GroupCommit>>,
}

/// The file of a SQLite database URL (`sqlite://PATH`, `sqlite:PATH` or a
/// bare path); `None` for PostgreSQL. What the node keeps beside its
/// database (the data key file it creates on first start) goes next to it.
pub fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return None;
    }
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    (!path.is_empty() && path != ":memory:").then(|| path.into())
}

/// Accepts `postgres://…`, `sqlite://PATH`, `sqlite:PATH` or a bare file path.
fn normalize_url(url: &str) -> anyhow::Result<(String, Dialect)> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok((url.to_owned(), Dialect::Postgres));
    }
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    anyhow::ensure!(
        !path.is_empty() && path != ":memory:",
        "a SQLite database must be a file, got {url:?}"
    );
    if let Some(parent) = Path::new(path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let query = if query.is_empty() {
        "mode=rwc".to_owned()
    } else {
        query.to_owned()
    };
    Ok((format!("sqlite://{path}?{query}"), Dialect::Sqlite))
}

/// What [`Database::open_existing`] refuses: a database that is not there.
#[derive(Debug, thiserror::Error)]
#[error("the database {0} does not exist (nothing was created)")]
pub struct NoSuchDatabase(pub String);

impl Database {
    pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<Self> {
        let (url, dialect) = normalize_url(url)?;
        Self::connect_normalized(url, dialect, max_connections).await
    }

    /// A database that already exists, for a command only asked to read
    /// or act on one: a SQLite file that is not there is
    /// [`NoSuchDatabase`], and neither it nor its directory is created
    /// (`mode=rw`); a PostgreSQL server refuses a database it does not
    /// have by itself. Migrations are not run.
    pub async fn open_existing(url: &str, max_connections: u32) -> anyhow::Result<Self> {
        let Some(file) = sqlite_file(url) else {
            let (url, dialect) = normalize_url(url)?;
            return Self::connect_normalized(url, dialect, max_connections).await;
        };
        if !file.is_file() {
            return Err(NoSuchDatabase(file.display().to_string()).into());
        }
        let query = url.split_once('?').map_or("", |(_, q)| q);
        let query = if query.is_empty() { "mode=rw" } else { query };
        let url = format!("sqlite://{}?{query}", file.display());
        Self::connect_normalized(url, Dialect::Sqlite, max_connections).await
    }

    async fn connect_normalized(
        url: String,
        dialect: Dialect,
        max_connections: u32,
    ) -> anyhow::Result<Self> {
        static DRIVERS: Once = Once::new();
        DRIVERS.call_once(sqlx::any::install_default_drivers);

        let options = AnyConnectOptions::from_str(&url).context("parsing the database URL")?;
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(5))
            // A pooled PostgreSQL connection may have died with its server:
            // ping it before use. A SQLite connection is a file in this
            // process; the ping would be one more hand-off to its thread.
            .test_before_acquire(dialect == Dialect::Postgres)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if dialect == Dialect::Sqlite {
                        // WAL lets readers run beside the one writer; FULL
                        // makes every commit durable before we acknowledge it
                        // (nothing acknowledged is lost, even on power loss).
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA synchronous = FULL").await?;
                        conn.execute("PRAGMA busy_timeout = 5000").await?;
                    } else {
                        // Every query sent here is served by an index
                        // (`tests/api/query_plans.rs` plans them this way).
                        // A prepared statement keeps the plan made from the
                        // statistics of its moment, and a young table's
                        // (autovacuum refreshes them at most once a minute)
                        // make a scan of it look cheapest: a new region's
                        // finishes each read the whole table until then,
                        // 3–4 ms a batch's statement (decision 0069).
                        conn.execute("SET enable_seqscan = off").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await
            .with_context(|| format!("connecting to the {dialect:?} database"))?;
        Ok(Self {
            pool,
            dialect,
            write_gate: Arc::default(),
            batches: Arc::default(),
        })
    }

    /// Take before each write, hold until it commits: the write gate on
    /// SQLite, nothing on PostgreSQL.
    pub async fn writer(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match self.dialect {
            Dialect::Sqlite => Some(self.write_gate.lock().await),
            Dialect::Postgres => None,
        }
    }

    /// The group commit in front of this pool ([`group_commit`]): writes of
    /// concurrent callers share one transaction and one commit. Starts its
    /// writer tasks on first use (inside the runtime); on SQLite they take
    /// the write gate per batch.
    pub fn batches(&self) -> &GroupCommit {
        self.batches.get_or_init(|| {
            let gate = (self.dialect == Dialect::Sqlite).then(|| self.write_gate.clone());
            GroupCommit::start(self.pool.clone(), self.dialect, gate)
        })
    }

    /// The OpenTelemetry `db.system` name of the dialect.
    pub fn system(&self) -> &'static str {
        match self.dialect {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgresql",
        }
    }

    /// Applies pending migrations. Safe to run from several processes at
    /// once: sqlx serializes them with a lock on PostgreSQL, and SQLite's
    /// single writer does the same.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        let migrator = match self.dialect {
            Dialect::Sqlite => &SQLITE_MIGRATIONS,
            Dialect::Postgres => &POSTGRES_MIGRATIONS,
        };
        migrator.run(&self.pool).await.context("running migrations")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_pick_their_dialect() {
        assert_eq!(
            normalize_url("postgres://u@h/db").unwrap().1,
            Dialect::Postgres
        );
        let dir = std::env::temp_dir().join("once-url-test");
        let (url, dialect) = normalize_url(dir.join("a.db").to_str().unwrap()).unwrap();
        assert_eq!(dialect, Dialect::Sqlite);
        assert!(
            url.starts_with("sqlite://") && url.ends_with("a.db?mode=rwc"),
            "{url}"
        );
        assert!(normalize_url("sqlite::memory:").is_err());
    }

    #[tokio::test]
    async fn opening_an_existing_database_creates_nothing_that_is_not_there() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nowhere").join("node.db");
        let error = Database::open_existing(missing.to_str().unwrap(), 1)
            .await
            .unwrap_err();
        assert!(
            error.downcast_ref::<NoSuchDatabase>().is_some(),
            "{error:#}"
        );
        assert!(error.to_string().contains("does not exist"), "{error}");
        assert!(!dir.path().join("nowhere").exists(), "no directory made");

        let file = dir.path().join("node.db");
        let made = Database::connect(file.to_str().unwrap(), 1).await.unwrap();
        made.pool.close().await;
        let opened = Database::open_existing(&format!("sqlite://{}", file.display()), 1)
            .await
            .unwrap();
        sqlx::query("SELECT 1").execute(&opened.pool).await.unwrap();
        opened.pool.close().await;
    }
}
