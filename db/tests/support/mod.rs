//! What the group commit's tests share: a database of each dialect with
//! one table, `written (row TEXT PRIMARY KEY)`, and how a write into it fails.

use once_db::group_commit::Refusal;
use once_db::{BatchFailed, Database, Dialect};
use once_test_support::postgres::PgDatabase;
use once_test_support::services::postgres_available;
use sqlx::Executor;

/// How a test's write ended, when not `Ok`.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Refused by a statement that wrote nothing.
    #[error("refused")]
    Refused,
    /// Failed after it wrote (in `gather.rs`, a job with a row named `poison`).
    #[error("failed after writing")]
    AfterWrite,
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    NotCommitted(#[from] BatchFailed),
}

impl Refusal for WriteError {
    fn wrote_nothing(&self) -> bool {
        matches!(self, WriteError::Refused)
    }
}

/// Where a test's database lives; dropped with the test.
pub enum Place {
    #[allow(dead_code)] // held for its drop
    File(tempfile::TempDir),
    #[allow(dead_code)] // held for its drop
    Postgres(PgDatabase),
}

/// The dialects to run on: SQLite, and PostgreSQL unless unavailable
/// outside CI.
pub fn dialects() -> Vec<Dialect> {
    let mut dialects = vec![Dialect::Sqlite];
    if postgres_available() {
        dialects.push(Dialect::Postgres);
    }
    dialects
}

pub async fn open(dialect: Dialect) -> (Place, Database) {
    let (place, url) = match dialect {
        Dialect::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let url = dir.path().join("written.db").to_str().unwrap().to_owned();
            (Place::File(dir), url)
        }
        Dialect::Postgres => {
            let pg = PgDatabase::create().await;
            let url = pg.url.clone();
            (Place::Postgres(pg), url)
        }
    };
    let db = Database::connect(&url, 4).await.unwrap();
    db.pool
        .execute("CREATE TABLE written (row TEXT PRIMARY KEY)")
        .await
        .unwrap();
    (place, db)
}
