//! `once migrate`: apply the regional database's migrations and exit (the
//! Kubernetes migration Job runs this, so replicas never race on startup).

use clap::Args;
use once_node::sql::Database;

use super::config_error;
use super::node::redact_url;

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// `postgres://…` or a SQLite file.
    #[arg(long, env = "ONCE_DATABASE_URL", default_value = "once-data/node.db")]
    pub database_url: String,
    /// Print the effective configuration (password redacted) as JSON and
    /// exit without connecting: CI runs the manifests' flags through this.
    #[arg(long)]
    pub check_config: bool,
}

pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    if args.database_url.trim().is_empty() {
        return Err(config_error(anyhow::anyhow!("--database-url is empty")));
    }
    if args.check_config {
        println!(
            "{}",
            serde_json::json!({
                "role": "migrate",
                "databaseUrl": redact_url(&args.database_url),
            })
        );
        return Ok(());
    }
    let db = Database::connect(&args.database_url, 1).await?;
    db.migrate().await?;
    tracing::info!(dialect = ?db.dialect, "migrations applied");
    Ok(())
}
