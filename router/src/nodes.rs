//! Where each region's nodes are: `--nodes REGION=URL,REGION=URL,...`.
//!
//! A region may be named several times (several nodes, or several
//! load-balancer addresses); requests for it rotate round-robin over them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A `--nodes` entry that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum NodesError {
    #[error("node entry {0:?} is not REGION=URL")]
    NotRegionEqualsUrl(String),
    #[error("node URL {0:?} must start with http:// or https://")]
    NotHttp(String),
    #[error("no nodes configured: give --nodes REGION=URL,…")]
    Empty,
}

#[derive(Debug)]
struct RegionNodes {
    urls: Vec<String>,
    /// Next index to hand out; wraps. Relaxed: fairness, not correctness.
    next: AtomicUsize,
}

/// Every region's node base URLs, in the order given.
#[derive(Debug, Default)]
pub struct NodeDirectory {
    regions: BTreeMap<String, RegionNodes>,
}

impl NodeDirectory {
    /// Parses `REGION=URL` entries (already split on commas).
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, NodesError> {
        let mut regions: BTreeMap<String, RegionNodes> = BTreeMap::new();
        for entry in entries
            .iter()
            .map(|e| e.as_ref().trim())
            .filter(|e| !e.is_empty())
        {
            let (region, url) = entry
                .split_once('=')
                .filter(|(r, u)| !r.trim().is_empty() && !u.trim().is_empty())
                .ok_or_else(|| NodesError::NotRegionEqualsUrl(entry.to_owned()))?;
            let url = url.trim().trim_end_matches('/');
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(NodesError::NotHttp(url.to_owned()));
            }
            regions
                .entry(region.trim().to_owned())
                .or_insert_with(|| RegionNodes {
                    urls: Vec::new(),
                    next: AtomicUsize::new(0),
                })
                .urls
                .push(url.to_owned());
        }
        if regions.is_empty() {
            return Err(NodesError::Empty);
        }
        Ok(Self { regions })
    }

    pub fn regions(&self) -> impl Iterator<Item = &str> {
        self.regions.keys().map(String::as_str)
    }

    pub fn contains(&self, region: &str) -> bool {
        self.regions.contains_key(region)
    }

    /// All node URLs of `region` (empty if unknown).
    pub fn urls(&self, region: &str) -> &[String] {
        self.regions.get(region).map_or(&[], |r| r.urls.as_slice())
    }

    /// The region's nodes starting at the next round-robin position: the
    /// first is where a request goes, the rest are where it may go if the
    /// first cannot be connected to.
    pub fn rotation(&self, region: &str) -> Vec<&str> {
        let Some(nodes) = self.regions.get(region) else {
            return Vec::new();
        };
        let n = nodes.urls.len();
        let start = nodes.next.fetch_add(1, Ordering::Relaxed) % n;
        (0..n)
            .map(|i| nodes.urls[(start + i) % n].as_str())
            .collect()
    }

    /// `REGION=URL` entries, for `--check-config` and logs.
    pub fn describe(&self) -> BTreeMap<&str, &[String]> {
        self.regions
            .iter()
            .map(|(r, n)| (r.as_str(), n.urls.as_slice()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_regions_rotate_round_robin() {
        let nodes =
            NodeDirectory::parse(&["eu=http://a:1/", "us=http://b:1", "eu=http://c:1"]).unwrap();
        assert_eq!(nodes.urls("eu"), ["http://a:1", "http://c:1"]);
        assert_eq!(nodes.rotation("eu"), ["http://a:1", "http://c:1"]);
        assert_eq!(nodes.rotation("eu"), ["http://c:1", "http://a:1"]);
        assert_eq!(nodes.rotation("us"), ["http://b:1"]);
        assert!(nodes.rotation("ap").is_empty());
    }

    #[test]
    fn malformed_entries_are_refused() {
        assert!(NodeDirectory::parse(&["eu"]).is_err());
        assert!(NodeDirectory::parse(&["=http://a"]).is_err());
        assert!(NodeDirectory::parse(&["eu=a:1"]).is_err());
        assert!(NodeDirectory::parse::<&str>(&[]).is_err());
    }
}
