//! `--cluster cluster.json`: what the operator commands (`once store
//! status | add-learner | …`, `once records`, `once events`) know of a
//! running cluster without being told each piece — its store members,
//! nodes, databases, TLS material and admin tokens, as `once up` writes
//! them (`once_drill::cluster`, the same contract the drills read).
//!
//! A flag given explicitly (`--endpoints`, `--node`, `--database-url`,
//! `--tls-*`, `ONCE_ADMIN_TOKEN`) wins over the file. Without `--cluster`
//! the commands read `once-data/cluster.json` when it exists (where `once
//! up` writes it by default); a file named explicitly that cannot be read
//! is an error, never an empty answer.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use once_drill::cluster::Cluster;

/// Where `once up` writes its description by default (`--dir once-data`).
pub const DEFAULT_CLUSTER: &str = "once-data/cluster.json";

/// What a TLS failure tells the operator to check.
pub const TLS_HINT: &str = "the members speak mutual TLS: pass an operator certificate with \
     --tls-ca, --tls-cert and --tls-key, or --cluster once-data/cluster.json";

#[derive(Debug, Args, Clone, Default)]
pub struct ClusterArgs {
    /// The cluster description `once up` writes (endpoints, TLS material,
    /// admin tokens, databases) [default: once-data/cluster.json, when it
    /// exists]. Flags given explicitly win over it.
    #[arg(long, env = "ONCE_CLUSTER", value_name = "cluster.json", global = true)]
    pub cluster: Option<PathBuf>,
}

/// A cluster description read from its file.
#[derive(Debug, Clone)]
pub struct Described {
    pub path: PathBuf,
    pub cluster: Cluster,
}

impl ClusterArgs {
    /// The file named by `--cluster`, else [`DEFAULT_CLUSTER`] if it
    /// exists, else `None`. A named file that is missing or unreadable is
    /// an error.
    pub fn load(&self) -> anyhow::Result<Option<Described>> {
        let path = match &self.cluster {
            Some(path) => path.clone(),
            None if Path::new(DEFAULT_CLUSTER).is_file() => PathBuf::from(DEFAULT_CLUSTER),
            None => return Ok(None),
        };
        let cluster = Cluster::load(&path).with_context(|| {
            format!(
                "reading the cluster description {} (written by `once up`)",
                path.display()
            )
        })?;
        Ok(Some(Described { path, cluster }))
    }

    /// [`Self::load`], or an error saying what to pass instead of
    /// `explicit` when there is no cluster description.
    pub fn require(&self, explicit: &str) -> anyhow::Result<Described> {
        self.load()?.with_context(|| {
            format!(
                "no cluster to talk to: pass --cluster PATH (the cluster.json `once up` writes; \
                 {DEFAULT_CLUSTER} does not exist here) or {explicit}"
            )
        })
    }
}

impl Described {
    /// The region named `name`, or every region when `name` is `None`.
    pub fn regions(&self, name: Option<&str>) -> anyhow::Result<Vec<&once_drill::cluster::Region>> {
        match name {
            Some(name) => Ok(vec![self.cluster.region(name, &self.path)?]),
            None => Ok(self.cluster.regions.iter().collect()),
        }
    }

    /// Every store member's admin listener (status and operator actions
    /// are served there), in the file's region order.
    pub fn store_admin_urls(&self) -> anyhow::Result<Vec<String>> {
        let urls: Vec<String> = self
            .cluster
            .regions
            .iter()
            .filter_map(|r| r.store.as_ref().map(|s| s.admin().to_owned()))
            .collect();
        anyhow::ensure!(
            !urls.is_empty(),
            "{} names no raft-store member",
            self.path.display()
        );
        Ok(urls)
    }

    /// The operator's certificate the file names, loaded.
    pub fn operator_tls(&self) -> anyhow::Result<Option<once_tls::Tls>> {
        self.cluster
            .operator_tls()
            .with_context(|| format!("the TLS material {} names", self.path.display()))
    }
}

/// An explicit admin token (`ONCE_ADMIN_TOKEN`), else the one `from_file`
/// picks out of the cluster description; `what` names it in the error.
pub fn admin_token(
    described: Option<&Described>,
    from_file: fn(&Cluster) -> &str,
    what: &str,
) -> anyhow::Result<once_edge::AdminToken> {
    if let Some(token) = super::edge::admin_token()? {
        return Ok(token);
    }
    let Some(described) = described else {
        anyhow::bail!(
            "no {what}: set {} or pass --cluster once-data/cluster.json",
            super::edge::ADMIN_TOKEN_ENV
        );
    };
    let token = from_file(&described.cluster);
    anyhow::ensure!(
        !token.is_empty(),
        "{} holds no {what}; set {}",
        described.path.display(),
        super::edge::ADMIN_TOKEN_ENV
    );
    once_edge::AdminToken::new(token)
        .map_err(|e| anyhow::anyhow!("the {what} in {}: {e}", described.path.display()))
}

/// Whether `error`'s chain looks like a TLS or connection refusal (the
/// handshake failed, or a plaintext request met a TLS listener).
pub fn is_tls_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e.to_string().to_ascii_lowercase();
        if ["certificate", "tls", "handshake", "invalid http version"]
            .iter()
            .any(|w| text.contains(w))
        {
            return true;
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_file_that_is_missing_is_an_error_not_an_empty_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let args = ClusterArgs {
            cluster: Some(dir.path().join("cluster.json")),
        };
        let error = format!("{:#}", args.load().unwrap_err());
        assert!(error.contains("cluster.json"), "{error}");
        assert!(!dir.path().join("cluster.json").exists());
    }
}
