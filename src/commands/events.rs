//! `once events`: look at and act on the event path of a regional database.
//!
//! - `once events dead-letters` lists the messages consumers gave up on,
//!   with their last error;
//! - `once events redrive ID` asks the nodes to run one again (a node's
//!   redriver picks it up within its poll interval).
//!
//! The database is `--database-url`, or each region's from `--cluster`
//! (`once up`'s `cluster.json`; `--region` picks one). A database that is
//! not there is an error: the command opens it, never creates it, and runs
//! no migration (decision 0082).

use anyhow::Context;
use clap::{Args, Subcommand};
use once_node::domain::{Clock, SystemClock};
use once_node::events::dead_letters::{self, DeadLetter};
use once_node::sql::Database;

use super::cluster_file::ClusterArgs;

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// `postgres://…` or a SQLite file: the database the nodes use
    /// [default: each region's, from --cluster].
    #[arg(long, env = "ONCE_DATABASE_URL", global = true)]
    pub database_url: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// With --cluster: only this region's database (required by `redrive`
    /// when the cluster has several: a dead letter's id is its database's).
    #[arg(long, global = true)]
    pub region: Option<String>,
    #[command(subcommand)]
    pub command: EventsCommand,
}

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// List dead-lettered messages, newest first.
    DeadLetters {
        /// Only this consumer's (`ledger`, `receipt-email`, `webhooks`, or
        /// `webhook_delivery` for webhook deliveries out of retries).
        #[arg(long)]
        consumer: Option<String>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run dead letter ID through its consumer again (after fixing the cause).
    Redrive {
        /// The id shown by `once events dead-letters`.
        id: i64,
    },
}

/// A database to act on, and the region it serves (`None`: named by URL).
struct Target {
    region: Option<String>,
    url: String,
}

fn targets(args: &EventsArgs) -> anyhow::Result<Vec<Target>> {
    if let Some(url) = &args.database_url {
        return Ok(vec![Target {
            region: None,
            url: url.clone(),
        }]);
    }
    let described = args.cluster.require("--database-url URL")?;
    Ok(described
        .regions(args.region.as_deref())?
        .into_iter()
        .map(|r| Target {
            region: Some(r.name.clone()),
            url: r.database_url.clone(),
        })
        .collect())
}

/// What a failed read or write of `target` is said to be: a database
/// without the event path's tables was never a node's, or is older.
fn on(target: &Target) -> String {
    format!(
        "the dead letters of {} (a node's database? migrated by `once migrate`?)",
        target.url
    )
}

pub async fn run(args: EventsArgs) -> anyhow::Result<()> {
    let targets = targets(&args)?;
    match args.command {
        EventsCommand::DeadLetters { consumer, json } => {
            let mut listed: Vec<(Option<String>, DeadLetter)> = Vec::new();
            for target in &targets {
                let db = Database::open_existing(&target.url, 1).await?;
                let letters = dead_letters::list(&db, consumer.as_deref())
                    .await
                    .with_context(|| on(target))?;
                db.pool.close().await;
                listed.extend(letters.into_iter().map(|l| (target.region.clone(), l)));
            }
            // With the cluster the table has a region column even when
            // it is empty: it says which databases were read.
            let by_region = targets.iter().any(|t| t.region.is_some());
            print_letters(&listed, by_region, json)?;
        }
        EventsCommand::Redrive { id } => {
            let [target] = targets.as_slice() else {
                anyhow::bail!(
                    "the cluster has {} regions, each with its own dead letter ids: pass --region",
                    targets.len()
                );
            };
            let db = Database::open_existing(&target.url, 1).await?;
            let requested = dead_letters::request_redrive(&db, id, SystemClock.now())
                .await
                .with_context(|| on(target))?;
            let found = if requested {
                None
            } else {
                Some(
                    dead_letters::get(&db, id)
                        .await
                        .with_context(|| on(target))?,
                )
            };
            db.pool.close().await;
            match found {
                None => {
                    println!("redrive requested for dead letter {id}; a node will run it shortly")
                }
                Some(None) => anyhow::bail!("no dead letter {id}"),
                Some(Some(letter)) => anyhow::bail!(
                    "dead letter {id} is {}, not DEAD: nothing to redrive",
                    letter.status
                ),
            }
        }
    }
    Ok(())
}

fn print_letters(
    letters: &[(Option<String>, DeadLetter)],
    by_region: bool,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        for (region, letter) in letters {
            let mut value = serde_json::to_value(letter)?;
            if let (Some(region), Some(object)) = (region, value.as_object_mut()) {
                object.insert("region".into(), region.clone().into());
            }
            println!("{value}");
        }
        return Ok(());
    }
    let region_column = |r: &Option<String>| match (by_region, r) {
        (true, r) => format!("{:<10} ", r.as_deref().unwrap_or("")),
        (false, _) => String::new(),
    };
    println!(
        "{}{:>6}  {:<14} {:<40} {:<18} {:>8}  last error",
        region_column(&Some("region".into())),
        "id",
        "consumer",
        "message id",
        "status",
        "attempts"
    );
    for (region, l) in letters {
        println!(
            "{}{:>6}  {:<14} {:<40} {:<18} {:>8}  {}",
            region_column(region),
            l.id,
            l.consumer_name,
            l.message_id,
            l.status,
            l.attempts,
            l.last_error
        );
    }
    Ok(())
}
