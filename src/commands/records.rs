//! `once records`: the operator's view of idempotency records, through a
//! node's admin listener, with the nodes' admin token (`ONCE_ADMIN_TOKEN`,
//! else `--cluster`'s `admin_tokens.node`).
//!
//! Which node: `--node URL`, or from `--cluster` (`once up`'s
//! `cluster.json`): `list` asks every region's node (or `--region`'s) and
//! shows each record once; `show` and `resolve` ask the tenant's home
//! region's node first, then the others, and act where the record is found.
//! Every refusal exits non-zero and says what was refused: a 401 names the
//! admin token, a 404 on a key is "no such record".

use anyhow::Context;
use clap::{Args, Subcommand};
use once_node::admin::{RecordView, ResolveRequest};

use super::cluster_file::{self, ClusterArgs, Described};

#[derive(Debug, Args)]
pub struct RecordsArgs {
    /// A node's admin listener [default: from --cluster].
    #[arg(long, env = "ONCE_NODE_ADMIN_URL", global = true)]
    pub node: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// With --cluster: ask only this region's node.
    #[arg(long, global = true)]
    pub region: Option<String>,
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

/// A node's admin listener to ask, and its region when known.
struct NodeAdmin {
    region: Option<String>,
    base: String,
}

/// The nodes to ask, in order: `--node`, else `--region`'s, else (for a
/// tenant) its home region's first, then every other region's.
fn nodes(
    args: &RecordsArgs,
    described: Option<&Described>,
    tenant: Option<&str>,
) -> anyhow::Result<Vec<NodeAdmin>> {
    if let Some(node) = &args.node {
        return Ok(vec![NodeAdmin {
            region: None,
            base: node.trim_end_matches('/').to_owned(),
        }]);
    }
    let described = described.context(
        "no node to ask: pass --cluster PATH (the cluster.json `once up` writes) or --node URL",
    )?;
    let mut regions = described.regions(args.region.as_deref())?;
    let home = tenant.and_then(|t| {
        described
            .cluster
            .tenants
            .iter()
            .find(|x| x.id == t)
            .map(|x| x.home_region.clone())
    });
    if let Some(home) = home {
        regions.sort_by_key(|r| r.name != home);
    }
    Ok(regions
        .into_iter()
        .map(|r| NodeAdmin {
            region: Some(r.name.clone()),
            base: r.node.admin().trim_end_matches('/').to_owned(),
        })
        .collect())
}

/// A node's refusal, said as what was refused.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error(
        "{url} refused the admin token (401): ONCE_ADMIN_TOKEN, or admin_tokens.node in the cluster description, must hold the nodes' admin token"
    )]
    AdminToken { url: String },
    #[error("no such record: tenant {tenant:?}, key {key:?} (asked {asked})")]
    NoSuchRecord {
        tenant: String,
        key: String,
        asked: String,
    },
    #[error("{url} answered {status}: {body}")]
    Other {
        url: String,
        status: reqwest::StatusCode,
        body: String,
    },
}

/// The answer of a request to `url`, or what refused it.
async fn send(request: reqwest::RequestBuilder, url: &str) -> anyhow::Result<reqwest::Response> {
    let response = request
        .send()
        .await
        .with_context(|| format!("reaching the node's admin listener at {url}"))?;
    let status = response.status();
    if status.is_success() || status == reqwest::StatusCode::NOT_FOUND {
        return Ok(response);
    }
    if status == reqwest::StatusCode::UNAUTHORIZED {
        return Err(Refusal::AdminToken {
            url: url.to_owned(),
        }
        .into());
    }
    let body = response.text().await.unwrap_or_default();
    Err(Refusal::Other {
        url: url.to_owned(),
        status,
        body,
    }
    .into())
}

/// A 404 from an endpoint that always exists when the admin token is set:
/// the node runs with its admin endpoints off.
fn endpoints_off(url: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{url} answered 404: that node's admin endpoints are off (it runs without ONCE_ADMIN_TOKEN)"
    )
}

fn print_records(records: &[RecordView]) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(records)?);
    Ok(())
}

/// Every principal's record for one key of a tenant, from the first node
/// that has it, with that node.
async fn records_for_key<'a>(
    client: &reqwest::Client,
    nodes: &'a [NodeAdmin],
    token: &str,
    tenant: &str,
    key: &str,
) -> anyhow::Result<(&'a NodeAdmin, Vec<RecordView>)> {
    for node in nodes {
        let url = format!(
            "{}/admin/records/{}/{}",
            node.base,
            segment(tenant),
            segment(key)
        );
        let response = send(client.get(&url).bearer_auth(token), &url).await?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            continue;
        }
        let records: Vec<RecordView> = response
            .json()
            .await
            .with_context(|| format!("reading {url}'s answer"))?;
        return Ok((node, records));
    }
    Err(Refusal::NoSuchRecord {
        tenant: tenant.to_owned(),
        key: key.to_owned(),
        asked: nodes
            .iter()
            .map(|n| match &n.region {
                Some(region) => format!("{region}'s node"),
                None => n.base.clone(),
            })
            .collect::<Vec<_>>()
            .join(", "),
    }
    .into())
}

pub async fn run(args: RecordsArgs) -> anyhow::Result<()> {
    let described = args.cluster.load()?;
    let token = cluster_file::admin_token(
        described.as_ref(),
        once_drill::cluster::Cluster::node_admin_token,
        "node admin token",
    )?;
    let token = token.expose();
    let client = reqwest::Client::new();
    match &args.command {
        RecordsCommand::List { status, limit } => {
            let mut listed: Vec<RecordView> = Vec::new();
            for node in nodes(&args, described.as_ref(), None)? {
                let url = format!("{}/admin/records", node.base);
                let request = client
                    .get(&url)
                    .query(&[("status", status.as_str()), ("limit", &limit.to_string())])
                    .bearer_auth(token);
                let response = send(request, &url).await?;
                if response.status() == reqwest::StatusCode::NOT_FOUND {
                    return Err(endpoints_off(&url));
                }
                let records: Vec<RecordView> = response
                    .json()
                    .await
                    .with_context(|| format!("reading {url}'s answer"))?;
                // Nodes that read the same shared store list the same
                // records: each once.
                for record in records {
                    let seen = listed.iter().any(|r| {
                        (&r.tenant, &r.principal, &r.key)
                            == (&record.tenant, &record.principal, &record.key)
                    });
                    if !seen {
                        listed.push(record);
                    }
                }
            }
            print_records(&listed)
        }
        RecordsCommand::Show { tenant, key } => {
            let nodes = nodes(&args, described.as_ref(), Some(tenant))?;
            let (_, records) = records_for_key(&client, &nodes, token, tenant, key).await?;
            print_records(&records)
        }
        RecordsCommand::Resolve {
            tenant,
            principal,
            key,
            outcome,
            reason,
            actor,
        } => {
            let nodes = nodes(&args, described.as_ref(), Some(tenant))?;
            let (node, records) = records_for_key(&client, &nodes, token, tenant, key).await?;
            let principal = match principal {
                Some(p) => p.clone(),
                None => match records.as_slice() {
                    [one] => one.principal.clone(),
                    _ => anyhow::bail!(
                        "{} principals used this key; pass --principal",
                        records.len()
                    ),
                },
            };
            let actor = actor
                .clone()
                .context("--actor is required when $USER is unset")?;
            let url = format!(
                "{}/admin/records/{}/{}/{}/resolve",
                node.base,
                segment(tenant),
                segment(&principal),
                segment(key)
            );
            let request = ResolveRequest {
                outcome: outcome.clone(),
                reason: reason.clone(),
                actor,
            };
            let response = send(client.post(&url).bearer_auth(token).json(&request), &url).await?;
            if response.status() == reqwest::StatusCode::NOT_FOUND {
                return Err(Refusal::NoSuchRecord {
                    tenant: tenant.clone(),
                    key: key.clone(),
                    asked: format!("{url} for principal {principal:?}"),
                }
                .into());
            }
            let record: RecordView = response
                .json()
                .await
                .with_context(|| format!("reading {url}'s answer"))?;
            print_records(&[record])
        }
    }
}
