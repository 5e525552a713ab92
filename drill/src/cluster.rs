//! The cluster description `once up` writes to `cluster.json`: where the
//! router, the provider simulator, every region's node, store member and
//! database are, and which tenants exist with their API keys and home
//! regions. This is the contract between `once up` and the drill; unknown
//! fields are ignored so `once up` can grow it without breaking drills.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The whole of `cluster.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    pub router: Endpoint,
    pub provider: Endpoint,
    /// One bearer token for the router's and nodes' `/admin/*` endpoints
    /// and the store members' operator endpoints, for a deployment that
    /// uses one; `admin_tokens` wins where it names a role's own.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub admin_token: String,
    /// A token per role and power (`once up` makes three, so a leaked one
    /// opens only its own); see [`Cluster::router_admin_token`] and its
    /// siblings.
    #[serde(default)]
    pub admin_tokens: AdminTokens,
    pub tenants: Vec<Tenant>,
    pub regions: Vec<Region>,
    /// The data key file the nodes seal with: the drill opens raft-store's
    /// stored answers with it to compare them with what was sent. Absent:
    /// stored answers are not compared.
    #[serde(default)]
    pub data_keys: Option<std::path::PathBuf>,
    /// `once up`'s control endpoint (restarts a killed region's processes,
    /// or one process: see [`crate::control`]); absent for clusters `once
    /// up` did not start.
    #[serde(default)]
    pub control: Option<ControlEndpoint>,
    /// The cluster's CA and the operator certificate the drill presents to
    /// the store members (mutual TLS); absent for a cluster in plaintext.
    #[serde(default)]
    pub tls: Option<ClusterTls>,
    /// raft-store's groups besides the directory, one per home region
    /// (docs/decisions/0063-a-raft-group-per-home-region.md): each member
    /// serves group `g` under `/groups/g`. Empty: one group.
    #[serde(default)]
    pub store_groups: Vec<String>,
}

/// The admin token of each role, where it has its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminTokens {
    /// The nodes' `/admin/*` (records, resolving them).
    #[serde(default)]
    pub node: Option<String>,
    /// The router's `/admin/*` (failover, failback, the partition switch,
    /// the console).
    #[serde(default)]
    pub router: Option<String>,
    /// The store members' operator endpoints (membership, elections,
    /// record dumps, the partition switch).
    #[serde(default)]
    pub store: Option<String>,
}

/// `once up`'s control endpoint and the bearer token it admits (made
/// afresh each run; only `cluster.json`, mode 0600, holds it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlEndpoint {
    pub url: String,
    pub token: String,
}

/// Where `once up` keeps the CA and the operator's certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterTls {
    pub ca: std::path::PathBuf,
    pub operator: CertificatePair,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertificatePair {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

impl Cluster {
    /// The operator's identity, when the cluster runs mutual TLS.
    pub fn operator_tls(&self) -> anyhow::Result<Option<once_tls::Tls>> {
        let Some(tls) = &self.tls else {
            return Ok(None);
        };
        let files = once_tls::TlsFiles {
            ca: tls.ca.clone(),
            cert: tls.operator.cert.clone(),
            key: tls.operator.key.clone(),
        };
        Ok(Some(once_tls::Tls::load(&files).map_err(|e| {
            anyhow::anyhow!("loading the operator's certificate: {e}")
        })?))
    }

    /// An HTTP client for every URL of the cluster: plain ones, and the
    /// store members' `https://` ones with the operator's certificate.
    pub fn http_client(&self) -> anyhow::Result<reqwest::ClientBuilder> {
        Ok(match self.operator_tls()? {
            Some(tls) => tls.http_client(),
            None => reqwest::Client::builder(),
        })
    }

    /// A reader of the members' status: the operator's certificate with
    /// mutual TLS, no admin token.
    pub fn observer(&self) -> anyhow::Result<once_store_client::admin::Operator> {
        Ok(once_store_client::admin::Operator::with_tls(
            None,
            self.operator_tls()?.as_ref(),
        ))
    }

    /// The router's admin token: its own, else the one shared token.
    pub fn router_admin_token(&self) -> &str {
        self.admin_tokens
            .router
            .as_deref()
            .unwrap_or(&self.admin_token)
    }

    /// The nodes' admin token: their own, else the one shared token.
    pub fn node_admin_token(&self) -> &str {
        self.admin_tokens
            .node
            .as_deref()
            .unwrap_or(&self.admin_token)
    }

    /// The store operator's token: its own, else the one shared token.
    pub fn store_operator_token(&self) -> &str {
        self.admin_tokens
            .store
            .as_deref()
            .unwrap_or(&self.admin_token)
    }

    /// The operator of the store members: the store operator's token, and
    /// the operator's certificate with mutual TLS.
    pub fn operator(&self) -> anyhow::Result<once_store_client::admin::Operator> {
        let token = once_edge::AdminToken::new(self.store_operator_token())
            .map_err(|e| anyhow::anyhow!("the cluster's store operator token: {e}"))?;
        Ok(once_store_client::admin::Operator::with_tls(
            Some(&token),
            self.operator_tls()?.as_ref(),
        ))
    }
}

/// A service reachable at a base URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub url: String,
    /// Its admin listener (`/admin/*`, metrics), when it has one of its own.
    #[serde(default)]
    pub admin_url: Option<String>,
    /// Its pid, for a process `once up` runs (the router); absent for the
    /// provider simulator, which runs inside `once up`.
    #[serde(default)]
    pub pid: Option<i32>,
}

impl Endpoint {
    /// Where its `/admin/*` endpoints are: the admin listener, or the
    /// service's own URL for one that serves both on one port.
    pub fn admin(&self) -> &str {
        self.admin_url.as_deref().unwrap_or(&self.url)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    pub id: String,
    pub api_key: String,
    pub home_region: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    pub name: String,
    pub node: Process,
    /// The region's raft-store member; absent while `once up` runs one
    /// region without a store.
    #[serde(default)]
    pub store: Option<StoreMember>,
    /// `postgres://…`, `sqlite://PATH`, `sqlite:PATH` or a bare file path.
    pub database_url: String,
}

/// A process the drill may kill: its URL and pid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    pub url: String,
    /// Its admin listener (probes, metrics), when it has one of its own.
    #[serde(default)]
    pub admin_url: Option<String>,
    #[serde(default)]
    pub pid: Option<i32>,
}

/// A raft-store member: its client/admin API and pid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreMember {
    pub api_url: String,
    /// Its admin listener (records, status, the partition switch; admin token).
    #[serde(default)]
    pub admin_url: Option<String>,
    #[serde(default)]
    pub pid: Option<i32>,
    /// Its Raft node id, and the address its peers reach it at (what a
    /// member is added back with after it was removed).
    #[serde(default)]
    pub id: Option<u64>,
    #[serde(default)]
    pub raft_addr: Option<String>,
}

impl Process {
    /// Where its probes are answered as Kubernetes asks them: the admin
    /// listener, or its own URL for one that serves both on one port.
    pub fn admin(&self) -> &str {
        self.admin_url.as_deref().unwrap_or(&self.url)
    }
}

impl StoreMember {
    /// Where its operator endpoints are: the admin listener, or the client
    /// API's URL for a member that serves both on one port.
    pub fn admin(&self) -> &str {
        self.admin_url.as_deref().unwrap_or(&self.api_url)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a cluster description: {source}")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path} names no region {region:?} (regions: {known})")]
    UnknownRegion {
        path: String,
        region: String,
        known: String,
    },
    #[error("{path} lists no tenants: the drill has no one to send payments as")]
    NoTenants { path: String },
}

impl Cluster {
    /// Reads and parses `cluster.json`.
    pub fn load(path: &Path) -> Result<Self, ClusterError> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| ClusterError::Read {
            path: shown.clone(),
            source,
        })?;
        let cluster: Cluster =
            serde_json::from_slice(&bytes).map_err(|source| ClusterError::Parse {
                path: shown.clone(),
                source,
            })?;
        if cluster.tenants.is_empty() {
            return Err(ClusterError::NoTenants { path: shown });
        }
        Ok(cluster)
    }

    /// The region named `name`, or an error naming the regions there are.
    pub fn region(&self, name: &str, path: &Path) -> Result<&Region, ClusterError> {
        self.regions
            .iter()
            .find(|r| r.name == name)
            .ok_or_else(|| ClusterError::UnknownRegion {
                path: path.display().to_string(),
                region: name.to_owned(),
                known: self
                    .regions
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Tenants whose home is `region`: the ones a fault there should hurt.
    pub fn tenants_homed_in(&self, region: &str) -> Vec<&Tenant> {
        self.tenants
            .iter()
            .filter(|t| t.home_region == region)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_shape_parses_and_unknown_fields_are_ignored() {
        let json = r#"{ "router": {"url": "http://127.0.0.1:8080", "pid": 120},
          "provider": {"url": "http://127.0.0.1:8099"},
          "admin_token": "t", "future": 1,
          "tenants": [{"id": "acme", "api_key": "k", "home_region": "eu-west", "extra": true}],
          "regions": [{"name": "eu-west", "node": {"url": "http://n", "pid": 123},
                       "store": {"api_url": "http://s", "pid": 124},
                       "database_url": "sqlite:///tmp/eu-west.db"},
                      {"name": "us-east", "node": {"url": "http://m"}, "database_url": "/tmp/us.db"}] }"#;
        let cluster: Cluster = serde_json::from_str(json).unwrap();
        assert_eq!(cluster.tenants[0].home_region, "eu-west");
        assert_eq!(cluster.router.pid, Some(120));
        assert_eq!(cluster.provider.pid, None);
        assert_eq!(cluster.regions[0].store.as_ref().unwrap().pid, Some(124));
        assert_eq!(cluster.regions[1].store, None);
        assert_eq!(cluster.tenants_homed_in("eu-west").len(), 1);
        assert!(
            cluster
                .region("ap-south", Path::new("c.json"))
                .unwrap_err()
                .to_string()
                .contains("eu-west, us-east")
        );
        // One token for everything: each role's is that one.
        assert_eq!(
            [
                cluster.router_admin_token(),
                cluster.node_admin_token(),
                cluster.store_operator_token()
            ],
            ["t"; 3]
        );
    }

    #[test]
    fn each_role_is_sent_its_own_token_when_the_cluster_has_one() {
        let json = r#"{ "router": {"url": "http://r"}, "provider": {"url": "http://p"},
          "admin_tokens": {"node": "n", "router": "r", "store": "s"},
          "control": {"url": "http://127.0.0.1:1", "token": "c"},
          "tenants": [{"id": "acme", "api_key": "k", "home_region": "eu-west"}],
          "regions": [] }"#;
        let cluster: Cluster = serde_json::from_str(json).unwrap();
        assert_eq!(cluster.router_admin_token(), "r");
        assert_eq!(cluster.node_admin_token(), "n");
        assert_eq!(cluster.store_operator_token(), "s");
        assert_eq!(cluster.control.unwrap().token, "c");
    }
}
