//! `once events`: look at and act on the event path of a regional database.
//!
//! - `once events dead-letters` lists the messages consumers gave up on,
//!   with their last error;
//! - `once events redrive ID` asks the nodes to run one again (a node's
//!   redriver picks it up within its poll interval).

use clap::{Args, Subcommand};
use once_node::domain::{Clock, SystemClock};
use once_node::events::dead_letters;
use once_node::sql::Database;

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// `postgres://…` or a SQLite file: the database the nodes use.
    #[arg(
        long,
        env = "ONCE_DATABASE_URL",
        default_value = "once-data/node.db",
        global = true
    )]
    pub database_url: String,
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

pub async fn run(args: EventsArgs) -> anyhow::Result<()> {
    let db = Database::connect(&args.database_url, 1).await?;
    db.migrate().await?;
    match args.command {
        EventsCommand::DeadLetters { consumer, json } => {
            let letters = dead_letters::list(&db, consumer.as_deref()).await?;
            if json {
                for letter in &letters {
                    println!("{}", serde_json::to_string(letter)?);
                }
            } else {
                println!(
                    "{:>6}  {:<14} {:<40} {:<18} {:>8}  last error",
                    "id", "consumer", "message id", "status", "attempts"
                );
                for l in &letters {
                    println!(
                        "{:>6}  {:<14} {:<40} {:<18} {:>8}  {}",
                        l.id, l.consumer_name, l.message_id, l.status, l.attempts, l.last_error
                    );
                }
            }
        }
        EventsCommand::Redrive { id } => {
            if dead_letters::request_redrive(&db, id, SystemClock.now()).await? {
                println!("redrive requested for dead letter {id}; a node will run it shortly");
            } else {
                match dead_letters::get(&db, id).await? {
                    None => anyhow::bail!("no dead letter {id}"),
                    Some(letter) => anyhow::bail!(
                        "dead letter {id} is {}, not DEAD: nothing to redrive",
                        letter.status
                    ),
                }
            }
        }
    }
    db.pool.close().await;
    Ok(())
}
