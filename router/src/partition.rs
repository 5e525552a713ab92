//! A simulated partition between this router and some regions, so a
//! failover drill can cut a region off inside the router's own transport
//! (like raft-store's `/admin/partition`, see `once_raft_store::wan`).
//!
//! While a region is cut, the router treats that region's nodes as
//! unreachable: a forward to it fails as a connect error would (503 +
//! `Retry-After: 1`, nothing sent) and its health checks fail, so automatic
//! failover moves its tenants after `--health-check-failures` rounds. When
//! the cut region is the router's own `--region`, it is the router that is
//! cut off: every *other* region's nodes are unreachable and its own stay
//! reachable.
//!
//! ```text
//!  router (us-east), cut [eu-west]:   ✓ us-east  ✓ ap-south  ✗ eu-west
//!  router (eu-west), cut [eu-west]:   ✓ eu-west  ✗ us-east   ✗ ap-south
//! ```
//!
//! [`RegionCut::reachable`] is the one decision; `forward` and `health` act
//! on it, `admin` changes it.

use std::collections::BTreeSet;
use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use serde::{Deserialize, Serialize};

/// The request body of `POST /admin/partition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetCut {
    /// The whole new set of cut regions (`[]` heals them all).
    pub cut_regions: Vec<String>,
}

/// The answer of `GET|POST /admin/partition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutState {
    /// This router's region.
    pub region: String,
    /// The regions cut off, as set, sorted.
    pub cut_regions: Vec<String>,
    /// The regions whose nodes this router treats as unreachable now.
    pub unreachable_regions: Vec<String>,
}

/// Which regions are cut off from this router.
#[derive(Debug)]
pub struct RegionCut {
    own_region: String,
    /// Read on every forward and health check, written only by an
    /// operator: a std `RwLock`, never held across an await.
    cut: RwLock<BTreeSet<String>>,
}

impl RegionCut {
    /// Nothing cut, for a router in `own_region`.
    pub fn new(own_region: &str) -> Self {
        Self {
            own_region: own_region.to_owned(),
            cut: RwLock::new(BTreeSet::new()),
        }
    }

    /// Whether this router may reach the nodes of `region` now.
    pub fn reachable(&self, region: &str) -> bool {
        let cut = self.read();
        if cut.contains(&self.own_region) {
            // The router's side of the partition is its own region alone.
            region == self.own_region
        } else {
            !cut.contains(region)
        }
    }

    /// Cuts exactly `regions` off (`[]` heals them all).
    pub fn set(&self, regions: impl IntoIterator<Item = String>) {
        let regions: BTreeSet<String> = regions
            .into_iter()
            .map(|r| r.trim().to_owned())
            .filter(|r| !r.is_empty())
            .collect();
        // Replaced whole, so a poisoned lock never holds a half-written set.
        *self.cut.write().unwrap_or_else(PoisonError::into_inner) = regions;
    }

    /// The state as the admin endpoint shows it, for the regions `known`.
    pub fn state<'a>(&self, known: impl Iterator<Item = &'a str>) -> CutState {
        CutState {
            region: self.own_region.clone(),
            cut_regions: self.read().iter().cloned().collect(),
            unreachable_regions: known
                .filter(|r| !self.reachable(r))
                .map(str::to_owned)
                .collect(),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, BTreeSet<String>> {
        self.cut.read().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGIONS: [&str; 3] = ["ap-south", "eu-west", "us-east"];

    #[test]
    fn nothing_is_cut_until_an_operator_says_so() {
        let cut = RegionCut::new("us-east");
        assert!(REGIONS.iter().all(|r| cut.reachable(r)));
        assert!(
            cut.state(REGIONS.into_iter())
                .unreachable_regions
                .is_empty()
        );
    }

    #[test]
    fn a_cut_region_is_unreachable_and_the_others_are_not() {
        let cut = RegionCut::new("us-east");
        cut.set(["eu-west".to_owned()]);
        assert!(!cut.reachable("eu-west"));
        assert!(cut.reachable("us-east") && cut.reachable("ap-south"));
        assert_eq!(
            cut.state(REGIONS.into_iter()),
            CutState {
                region: "us-east".into(),
                cut_regions: vec!["eu-west".into()],
                unreachable_regions: vec!["eu-west".into()],
            }
        );
    }

    #[test]
    fn a_router_in_the_cut_region_reaches_only_its_own_region() {
        let cut = RegionCut::new("eu-west");
        cut.set(["eu-west".to_owned()]);
        assert!(cut.reachable("eu-west"));
        assert!(!cut.reachable("us-east") && !cut.reachable("ap-south"));
        assert_eq!(
            cut.state(REGIONS.into_iter()).unreachable_regions,
            ["ap-south", "us-east"]
        );
    }

    #[test]
    fn healing_makes_every_region_reachable_again() {
        let cut = RegionCut::new("eu-west");
        cut.set(["eu-west".to_owned(), " us-east ".to_owned(), String::new()]);
        assert_eq!(
            cut.state(REGIONS.into_iter()).cut_regions,
            ["eu-west", "us-east"]
        );
        cut.set([]);
        assert!(REGIONS.iter().all(|r| cut.reachable(r)));
    }

    #[test]
    fn the_body_names_its_one_field() {
        let body: SetCut = serde_json::from_str(r#"{"cut_regions": ["eu-west"]}"#).unwrap();
        assert_eq!(body.cut_regions, ["eu-west"]);
        assert!(serde_json::from_str::<SetCut>(r#"{"isolated": true}"#).is_err());
    }
}
