//! `once store status | add-learner | change-membership | snapshot |
//! bench | place | partition`: the operator's commands against a running
//! raft-store cluster. The members, the operator's certificate and the
//! store operator's token come from the flags (`--endpoints`, `--tls-*`,
//! `ONCE_ADMIN_TOKEN`) or from `--cluster` (`once up`'s `cluster.json`,
//! decision 0082). Every failure exits non-zero with its cause: a TLS
//! failure names the certificate flags, a 401 the store operator token.

use std::time::Duration;

use clap::{Args, Subcommand};
use once_store_client::admin::{self, AdminError};

use super::{bench, place, status};
use crate::commands::cluster_file::{self, ClusterArgs, Described, TLS_HINT, is_tls_failure};
use crate::commands::tls::TlsArgs;

/// The members an admin command talks to: `--endpoints`, else every
/// member's admin listener from `--cluster` (decision 0082).
#[derive(Debug, Args)]
pub struct Members {
    /// raft-store members (admin listener or client API, `host:port` or a
    /// URL) [default: every member's, from --cluster].
    #[arg(long, value_delimiter = ',')]
    endpoints: Vec<String>,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// The one member an admin command acts on: `--endpoint`, or `--region`'s
/// from `--cluster`.
#[derive(Debug, Args)]
pub struct OneMember {
    /// The member's admin listener (`host:port` or a URL).
    #[arg(long, required_unless_present = "region")]
    endpoint: Option<String>,
    /// With --cluster: the member of this region.
    #[arg(long, conflicts_with = "endpoint")]
    region: Option<String>,
    #[command(flatten)]
    cluster: ClusterArgs,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Every Raft group (the directory and one per home region): leader,
    /// term, last log and applied index of each member, and each
    /// follower's lag; a table, or JSON Lines with --json.
    Status {
        #[command(flatten)]
        members: Members,
        /// The cluster's groups besides the directory [default: from
        /// --cluster].
        #[arg(long, env = "ONCE_STORE_GROUPS", value_delimiter = ',')]
        groups: Vec<String>,
        /// A JSON object per group and member (its status and `group`)
        /// instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Add a member as a learner (it catches up from the log or a snapshot).
    /// Asks the leader; waits out an election for up to 15 s.
    AddLearner {
        #[command(flatten)]
        members: Members,
        #[arg(long)]
        id: u64,
        #[arg(long)]
        raft_addr: String,
    },
    /// Set the voting members. Asks the leader; waits out an election for
    /// up to 15 s.
    ChangeMembership {
        #[command(flatten)]
        members: Members,
        #[arg(long, value_delimiter = ',', required = true)]
        voters: Vec<u64>,
    },
    /// Build a snapshot on one member now.
    Snapshot {
        #[command(flatten)]
        member: OneMember,
    },
    /// Closed-loop claim benchmark against a running cluster (JSON report).
    Bench {
        /// raft-store client API endpoints.
        #[arg(long, value_delimiter = ',', required_unless_present = "etcd")]
        endpoints: Vec<String>,
        /// Run the equivalent create-if-absent txn against etcd instead
        /// (its client URL, e.g. http://127.0.0.1:2379), for comparison.
        #[arg(long)]
        etcd: Option<String>,
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        #[arg(long, default_value_t = 10_000)]
        requests: usize,
        /// Simulated WAN: the client waits this many milliseconds before
        /// every request to a member other than its local one, and claims
        /// one key at a time (`--concurrency` is ignored). Start the members
        /// with the same `--wan-latency`.
        #[arg(long, value_name = "MS", conflicts_with = "etcd")]
        wan_latency: Option<u64>,
        /// With --wan-latency: the member the client sits beside —
        /// `first` (the first endpoint), `leader` or `follower`.
        #[arg(long, default_value = "first", requires = "wan_latency")]
        local_member: super::bench::LocalMember,
    },
    /// Seed many first placements: tenants PREFIX-0000000 … homed in
    /// --home with --standbys, --concurrency writes in flight (a large
    /// placement table for failover benchmarks). Existing ones are kept.
    /// With --groups, each tenant goes to --home's group (assigned there
    /// by the directory first) when --home names one.
    Place {
        #[command(flatten)]
        members: Members,
        /// The cluster's groups besides the directory (`once store
        /// --groups`) [default: from --cluster].
        #[arg(long, env = "ONCE_STORE_GROUPS", value_delimiter = ',')]
        groups: Vec<String>,
        #[arg(long, default_value = "bulk")]
        prefix: String,
        #[arg(long)]
        count: usize,
        #[arg(long)]
        home: String,
        #[arg(long, value_delimiter = ',', required = true)]
        standbys: Vec<String>,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
    },
    /// Show, or set with --isolated, whether a member is cut off from every
    /// other region, with --cut-regions which other regions are cut off
    /// from it (simulated partition: Raft RPC and clients across the cut are
    /// refused both ways; the process keeps running), and with
    /// --refuse-from which regions it refuses while still sending to them.
    Partition {
        #[command(flatten)]
        member: OneMember,
        #[arg(long)]
        isolated: Option<bool>,
        /// The whole set of regions cut off from this member; `""` heals.
        #[arg(long, value_delimiter = ',', num_args = 0..)]
        cut_regions: Option<Vec<String>>,
        /// The whole set of regions this member refuses but still sends
        /// to (a one-way cut); `""` heals.
        #[arg(long, value_delimiter = ',', num_args = 0..)]
        refuse_from: Option<Vec<String>>,
    },
}

impl AdminCommand {
    /// The `--cluster` this command was given (or defaults to).
    fn cluster(&self) -> Option<&ClusterArgs> {
        match self {
            Self::Status { members, .. }
            | Self::AddLearner { members, .. }
            | Self::ChangeMembership { members, .. }
            | Self::Place { members, .. } => Some(&members.cluster),
            Self::Snapshot { member } | Self::Partition { member, .. } => Some(&member.cluster),
            Self::Bench { .. } => None,
        }
    }
}

impl Members {
    /// `--endpoints`, else every member's admin listener in the cluster
    /// description.
    fn endpoints(&self, described: Option<&Described>) -> anyhow::Result<Vec<String>> {
        if !self.endpoints.is_empty() {
            return Ok(self.endpoints.clone());
        }
        match described {
            Some(d) => d.store_admin_urls(),
            None => Err(self.cluster.require("--endpoints HOST:PORT,…").unwrap_err()),
        }
    }
}

impl OneMember {
    fn endpoint(&self, described: Option<&Described>) -> anyhow::Result<String> {
        if let Some(endpoint) = &self.endpoint {
            return Ok(endpoint.clone());
        }
        let region = self
            .region
            .as_deref()
            .expect("clap requires one of the two");
        let described = match described {
            Some(d) => d,
            None => &self.cluster.require("--endpoint HOST:PORT")?,
        };
        let region = described.cluster.region(region, &described.path)?;
        let member = region.store.as_ref().ok_or_else(|| {
            anyhow::anyhow!(
                "{} names no store member in {}",
                described.path.display(),
                region.name
            )
        })?;
        Ok(member.admin().to_owned())
    }
}

/// The groups besides the directory: `--groups`, else the cluster's.
fn groups(given: Vec<String>, described: Option<&Described>) -> Vec<String> {
    if !given.is_empty() {
        return given;
    }
    described.map_or_else(Vec::new, |d| d.cluster.store_groups.clone())
}

/// What an operator action's failure says: which token or certificate.
fn explained(error: AdminError) -> anyhow::Error {
    let hint = match &error {
        AdminError::Refused { status: 401, .. } => Some(
            "the store refused the store operator token: ONCE_ADMIN_TOKEN, or admin_tokens.store in the cluster description, must hold it",
        ),
        AdminError::Http { .. } if is_tls_failure(&error) => Some(TLS_HINT),
        _ => None,
    };
    let error = anyhow::Error::new(error);
    match hint {
        Some(hint) => error.context(hint),
        None => error,
    }
}

pub async fn run(command: AdminCommand, tls: &TlsArgs) -> anyhow::Result<()> {
    let described = match command.cluster() {
        Some(cluster) => cluster.load()?,
        None => None,
    };
    let described = described.as_ref();
    // Certificates named by flags win over the cluster description's.
    let tls = match tls.load(&[once_tls::Role::Operator])? {
        Some(tls) => Some(tls),
        None => match described {
            Some(d) => d.operator_tls()?,
            None => None,
        },
    };
    // Operator actions need the token; status and bench do not.
    let operator = || -> anyhow::Result<admin::Operator> {
        let token = cluster_file::admin_token(
            described,
            once_drill::cluster::Cluster::store_operator_token,
            "store operator token",
        )?;
        Ok(admin::Operator::with_tls(Some(&token), tls.as_ref()))
    };
    match command {
        AdminCommand::Status {
            members,
            groups: given,
            json,
        } => {
            let endpoints = members.endpoints(described)?;
            let observer = admin::Operator::with_tls(None, tls.as_ref());
            let found = status::read(&observer, &endpoints, &groups(given, described)).await;
            if json {
                print!("{}", found.json_lines()?);
            } else {
                print!("{}", found.table());
            }
            let unreachable = found.unreachable();
            if !unreachable.is_empty() {
                anyhow::bail!(
                    "{} of the members' answers could not be read:\n  {}",
                    unreachable.len(),
                    unreachable.join("\n  ")
                );
            }
        }
        AdminCommand::AddLearner {
            members,
            id,
            raft_addr,
        } => {
            let endpoints = members.endpoints(described)?;
            admin::add_learner(&operator()?, &endpoints, id, &raft_addr)
                .await
                .map_err(explained)?;
        }
        AdminCommand::ChangeMembership { members, voters } => {
            let endpoints = members.endpoints(described)?;
            admin::change_membership(&operator()?, &endpoints, voters)
                .await
                .map_err(explained)?;
        }
        AdminCommand::Snapshot { member } => {
            let endpoint = member.endpoint(described)?;
            admin::snapshot(&operator()?, &endpoint)
                .await
                .map_err(explained)?;
        }
        AdminCommand::Bench {
            endpoints,
            etcd,
            concurrency,
            requests,
            wan_latency,
            local_member,
        } => {
            let report = match (etcd, wan_latency) {
                (Some(url), _) => bench::etcd_claims(&url, concurrency, requests, tls).await?,
                (None, Some(ms)) => {
                    let rtt = Duration::from_millis(ms);
                    bench::wan_claims(&endpoints, requests, rtt, local_member, tls).await?
                }
                (None, None) => bench::claims(&endpoints, concurrency, requests, tls).await?,
            };
            println!("{}", serde_json::to_string(&report)?);
        }
        AdminCommand::Place {
            members,
            groups: given,
            prefix,
            count,
            home,
            standbys,
            concurrency,
        } => {
            // The client API: placements are written through it.
            let endpoints = match (members.endpoints.is_empty(), described) {
                (true, Some(d)) => d
                    .cluster
                    .regions
                    .iter()
                    .filter_map(|r| r.store.as_ref().map(|s| s.api_url.clone()))
                    .collect(),
                _ => members.endpoints(described)?,
            };
            let options = once_store_client::client::ClientOptions {
                tls,
                ..Default::default()
            };
            let client = once_store_client::groups::StoreGroups::new(
                &endpoints,
                &groups(given, described),
                options,
            )?;
            let report =
                place::place(client, &prefix, count, &home, &standbys, concurrency).await?;
            println!("{}", serde_json::to_string(&report)?);
        }
        AdminCommand::Partition {
            member,
            isolated,
            cut_regions,
            refuse_from,
        } => {
            let endpoint = member.endpoint(described)?;
            let operator = operator()?;
            let named = |regions: Vec<String>| -> Vec<String> {
                regions.into_iter().filter(|r| !r.is_empty()).collect()
            };
            if let Some(regions) = cut_regions {
                admin::set_cut_regions(&operator, &endpoint, &named(regions))
                    .await
                    .map_err(explained)?;
            }
            if let Some(regions) = refuse_from {
                admin::set_refused_regions(&operator, &endpoint, &named(regions))
                    .await
                    .map_err(explained)?;
            }
            if let Some(isolated) = isolated {
                admin::set_partition(&operator, &endpoint, isolated)
                    .await
                    .map_err(explained)?;
            }
            let state = admin::partition(&operator, &endpoint)
                .await
                .map_err(explained)?;
            println!("{}", serde_json::to_string(&state)?);
        }
    }
    Ok(())
}
