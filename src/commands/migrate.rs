//! `once migrate`: apply the regional database's migrations and exit (the
//! Kubernetes migration Job runs this, so replicas never race on startup).

use clap::Args;
use once_node::sql::Database;

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// `postgres://…` or a SQLite file.
    #[arg(long, env = "ONCE_DATABASE_URL", default_value = "once-data/node.db")]
    pub database_url: String,
}

pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    let db = Database::connect(&args.database_url, 1).await?;
    db.migrate().await?;
    tracing::info!(dialect = ?db.dialect, "migrations applied");
    Ok(())
}
