//! What every fault needs to find its target: `cluster.json` read afresh
//! (restarts change pids), the operator's store calls (admin token), `once
//! up`'s control endpoint, and the store members as Raft sees them now
//! (who leads, who follows).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use once_store_client::admin::Operator;
use once_store_client::protocol::Status;

use crate::chaos::nemesis::{ProcessRef, Role};
use crate::cluster::{Cluster, StoreMember};
use crate::control::Control;

#[derive(Debug)]
pub struct Ctx {
    pub cluster_path: PathBuf,
    pub http: reqwest::Client,
    pub operator: Operator,
    pub control: Control,
}

/// A store member as its region and Raft know it.
#[derive(Debug, Clone)]
pub struct Member {
    pub region: String,
    pub admin_url: String,
    pub api_url: String,
    pub status: Status,
}

impl Ctx {
    pub fn new(cluster_path: PathBuf, cluster: &Cluster) -> anyhow::Result<Self> {
        let control = cluster
            .control
            .as_ref()
            .context("cluster.json has no control endpoint (start the cluster with `once up`)")?;
        Ok(Self {
            cluster_path,
            http: cluster
                .http_client()?
                .timeout(Duration::from_secs(5))
                .build()?,
            operator: cluster.operator()?,
            control: Control::new(control)?,
        })
    }

    /// `cluster.json` as it is now.
    pub fn cluster(&self) -> anyhow::Result<Cluster> {
        Ok(Cluster::load(&self.cluster_path)?)
    }

    /// The pid `cluster.json` gives `process`.
    pub fn pid(&self, process: &ProcessRef) -> anyhow::Result<i32> {
        let cluster = self.cluster()?;
        let region = cluster.region(&process.region, &self.cluster_path)?;
        let pid = match process.role {
            Role::Node => region.node.pid,
            Role::Store => region.store.as_ref().and_then(|s| s.pid),
        };
        pid.with_context(|| format!("cluster.json has no pid for {}", process.name()))
    }

    /// Every region's store member, in `cluster.json`'s order.
    pub fn stores(&self) -> anyhow::Result<Vec<(String, StoreMember)>> {
        Ok(self
            .cluster()?
            .regions
            .into_iter()
            .filter_map(|r| Some((r.name, r.store?)))
            .collect())
    }

    /// The members that answer their status now.
    pub async fn members(&self) -> anyhow::Result<Vec<Member>> {
        let mut members = Vec::new();
        for (region, store) in self.stores()? {
            if let Ok(status) = self.operator.status(store.admin()).await {
                members.push(Member {
                    region,
                    admin_url: store.admin().to_owned(),
                    api_url: store.api_url.clone(),
                    status,
                });
            }
        }
        Ok(members)
    }

    /// The member that leads now, and the others that answered.
    pub async fn leader_and_followers(&self) -> anyhow::Result<(Member, Vec<Member>)> {
        let members = self.members().await?;
        let (leaders, followers): (Vec<Member>, Vec<Member>) = members
            .into_iter()
            .partition(|m| m.status.leader == Some(m.status.id));
        let leader = leaders
            .into_iter()
            .max_by_key(|m| m.status.term)
            .context("no store member says it leads")?;
        Ok((leader, followers))
    }

    /// raft-store's groups besides the directory (`cluster.json`'s
    /// `store_groups`): each member serves group `g` under `/groups/g`.
    pub fn store_groups(&self) -> anyhow::Result<Vec<String>> {
        Ok(self.cluster()?.store_groups)
    }

    /// The store admin URLs of every member (the operator calls follow the
    /// leader among them).
    pub fn admin_urls(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .stores()?
            .into_iter()
            .map(|(_, s)| s.admin().to_owned())
            .collect())
    }
}
