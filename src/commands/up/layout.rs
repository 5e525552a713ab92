//! Where everything of a local cluster lives: region names, the ports each
//! process listens on and the files it keeps, chosen on the first `once up`
//! and read back by every later one (raft-store membership names its
//! members' addresses, so a resumed cluster must reuse them).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Region names for `--regions N`; beyond these, `region-<n>`.
const REGION_NAMES: &[&str] = &["eu-west", "us-east", "ap-south"];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionLayout {
    pub name: String,
    pub store_id: u64,
    pub store_raft: SocketAddr,
    pub store_api: SocketAddr,
    pub node: SocketAddr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub regions: Vec<RegionLayout>,
}

fn free_local_addr() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?)
}

fn region_name(i: usize) -> String {
    REGION_NAMES
        .get(i)
        .map_or_else(|| format!("region-{}", i + 1), |n| (*n).to_owned())
}

impl Layout {
    fn path(dir: &Path) -> PathBuf {
        dir.join("layout.json")
    }

    /// The layout kept in `dir`, or a new one for `regions` regions.
    pub fn load_or_create(dir: &Path, regions: usize) -> anyhow::Result<Self> {
        let path = Self::path(dir);
        if let Ok(bytes) = std::fs::read(&path) {
            let layout: Layout = serde_json::from_slice(&bytes)
                .with_context(|| format!("reading {}", path.display()))?;
            anyhow::ensure!(
                layout.regions.len() == regions,
                "{} holds a cluster of {} regions; start it with --regions {} or use another --dir",
                dir.display(),
                layout.regions.len(),
                layout.regions.len()
            );
            return Ok(layout);
        }
        let layout = Layout {
            regions: (0..regions)
                .map(|i| {
                    Ok(RegionLayout {
                        name: region_name(i),
                        store_id: i as u64 + 1,
                        store_raft: free_local_addr()?,
                        store_api: free_local_addr()?,
                        node: free_local_addr()?,
                    })
                })
                .collect::<anyhow::Result<_>>()?,
        };
        std::fs::write(&path, serde_json::to_vec_pretty(&layout)?)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(layout)
    }

    /// `id=raft address` of every member, for `once store --peers`.
    pub fn peers(&self) -> String {
        self.regions
            .iter()
            .map(|r| format!("{}={}", r.store_id, r.store_raft))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `id=region` of every member, for `once store --peer-regions`.
    pub fn peer_regions(&self) -> String {
        self.regions
            .iter()
            .map(|r| format!("{}={}", r.store_id, r.name))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Store client endpoints as seen from `region`: its own member first.
    pub fn store_endpoints_from(&self, region: &RegionLayout) -> Vec<String> {
        std::iter::once(region)
            .chain(self.regions.iter().filter(|r| r.name != region.name))
            .map(|r| format!("http://{}", r.store_api))
            .collect()
    }

    /// `region=url` of every node, for `once router --nodes`.
    pub fn nodes(&self) -> String {
        self.regions
            .iter()
            .map(|r| format!("{}=http://{}", r.name, r.node))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_is_kept_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = Layout::load_or_create(dir.path(), 3).unwrap();
        assert_eq!(
            first
                .regions
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>(),
            ["eu-west", "us-east", "ap-south"]
        );
        let again = Layout::load_or_create(dir.path(), 3).unwrap();
        assert_eq!(first, again);
        assert!(Layout::load_or_create(dir.path(), 2).is_err());
        let from_us = first.store_endpoints_from(&first.regions[1]);
        assert_eq!(from_us[0], format!("http://{}", first.regions[1].store_api));
        assert_eq!(from_us.len(), 3);
    }
}
