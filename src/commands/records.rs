//! `once records`: the operator's view of idempotency records, through a
//! node's admin listener, with the admin token from `ONCE_ADMIN_TOKEN`.

use anyhow::Context;
use clap::{Args, Subcommand};
use once_node::admin::{RecordView, ResolveRequest};

#[derive(Debug, Args)]
pub struct RecordsArgs {
    /// A node's admin listener.
    #[arg(
        long,
        env = "ONCE_NODE_ADMIN_URL",
        default_value = "http://127.0.0.1:9090",
        global = true
    )]
    pub node: String,
    #[command(subcommand)]
    pub command: RecordsCommand,
}

#[derive(Debug, Subcommand)]
pub enum RecordsCommand {
    /// Records in a status: unknown, in_progress, completed, failed_retryable, …
    List {
        #[arg(long, default_value = "unknown")]
        status: String,
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// Every principal's record for one key of a tenant.
    Show {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        key: String,
    },
    /// Resolve an operation whose provider outcome is unknown, by hand.
    Resolve {
        #[arg(long)]
        tenant: String,
        /// Needed when several principals used the key (see `show`).
        #[arg(long)]
        principal: Option<String>,
        #[arg(long)]
        key: String,
        #[arg(long, value_parser = ["charged", "not-charged"])]
        outcome: String,
        /// Why: goes into the audit entry.
        #[arg(long)]
        reason: String,
        /// Who: defaults to $USER.
        #[arg(long, env = "USER")]
        actor: Option<String>,
    },
}

fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

async fn checked(response: reqwest::Response) -> anyhow::Result<reqwest::Response> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = response.text().await.unwrap_or_default();
    anyhow::bail!("node answered {status}: {body}")
}

fn print_records(records: &[RecordView]) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(records)?);
    Ok(())
}

/// Every principal's record for one key of a tenant.
async fn records_for_key(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    tenant: &str,
    key: &str,
) -> anyhow::Result<Vec<RecordView>> {
    let url = format!("{base}/admin/records/{}/{}", segment(tenant), segment(key));
    Ok(checked(client.get(url).bearer_auth(token).send().await?)
        .await?
        .json()
        .await?)
}

pub async fn run(args: RecordsArgs) -> anyhow::Result<()> {
    let token = super::edge::admin_token()?.with_context(|| {
        format!(
            "{} must hold the node's admin token",
            super::edge::ADMIN_TOKEN_ENV
        )
    })?;
    let token = token.expose();
    let client = reqwest::Client::new();
    let base = args.node.trim_end_matches('/');
    match args.command {
        RecordsCommand::List { status, limit } => {
            let response = client
                .get(format!("{base}/admin/records"))
                .query(&[("status", status.as_str()), ("limit", &limit.to_string())])
                .bearer_auth(token)
                .send()
                .await?;
            let records: Vec<RecordView> = checked(response).await?.json().await?;
            print_records(&records)
        }
        RecordsCommand::Show { tenant, key } => {
            print_records(&records_for_key(&client, base, token, &tenant, &key).await?)
        }
        RecordsCommand::Resolve {
            tenant,
            principal,
            key,
            outcome,
            reason,
            actor,
        } => {
            let principal = match principal {
                Some(p) => p,
                None => {
                    let records = records_for_key(&client, base, token, &tenant, &key).await?;
                    match records.as_slice() {
                        [one] => one.principal.clone(),
                        _ => anyhow::bail!(
                            "{} principals used this key; pass --principal",
                            records.len()
                        ),
                    }
                }
            };
            let actor = actor.context("--actor is required when $USER is unset")?;
            let url = format!(
                "{base}/admin/records/{}/{}/{}/resolve",
                segment(&tenant),
                segment(&principal),
                segment(&key)
            );
            let request = ResolveRequest {
                outcome,
                reason,
                actor,
            };
            let record: RecordView = checked(
                client
                    .post(url)
                    .bearer_auth(token)
                    .json(&request)
                    .send()
                    .await?,
            )
            .await?
            .json()
            .await?;
            print_records(&[record])
        }
    }
}
