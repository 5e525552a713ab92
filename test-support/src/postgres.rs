//! A PostgreSQL database of the test's own on the server at `DATABASE_URL`:
//! created fresh, dropped (connections and all) when the test ends, passed
//! or failed. Check [`crate::services::postgres_available`] first.

use sqlx::{Connection, Executor};

use crate::cleanup;

#[derive(Debug)]
pub struct PgDatabase {
    /// The database's URL: the server's, naming this database.
    pub url: String,
    server: String,
    name: String,
}

impl PgDatabase {
    /// Creates `t_<uuid>` (what `.ci/run` drops if an interrupted run left
    /// it behind).
    pub async fn create() -> Self {
        let server = std::env::var("DATABASE_URL").expect("DATABASE_URL");
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&server)
            .await
            .expect("connect to PostgreSQL");
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .expect("create test database");
        Self {
            url: with_database(&server, &name),
            server,
            name,
        }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        cleanup::run(async move {
            if let Ok(mut admin) = sqlx::PgConnection::connect(&server).await {
                let _ = admin
                    .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                    .await;
            }
        });
    }
}

/// `server` (a URL, maybe with a database and a query) naming database `name`.
fn with_database(server: &str, name: &str) -> String {
    let (base, query) = server
        .split_once('?')
        .map_or((server, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}
