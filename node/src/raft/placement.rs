//! The placement epoch this node believes for each tenant.
//!
//! Every claim states the claiming region and the epoch it believes
//! (DESIGN §6); raft-store refuses a claim that is not from the tenant's
//! home at the current epoch and answers with the current placement. The
//! belief is only a hint: it is read from the store on a tenant's first
//! claim and corrected by every `Misdirected` answer, so a stale belief
//! costs one extra round trip, never a wrong claim.

use std::collections::HashMap;
use std::sync::Mutex;

use once_store_client::command::Placement;

#[derive(Debug, Default)]
pub struct PlacementBeliefs {
    by_tenant: Mutex<HashMap<String, Option<Placement>>>,
}

/// What a claim from this region should state for a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Belief {
    /// Never looked up.
    Unknown,
    /// Known: the epoch to state (0 for a tenant without a placement, which
    /// any region may claim for).
    Epoch(u64),
}

impl PlacementBeliefs {
    pub fn belief(&self, tenant: &str) -> Belief {
        let map = self.by_tenant.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(tenant) {
            None => Belief::Unknown,
            Some(p) => Belief::Epoch(p.as_ref().map_or(0, |p| p.epoch)),
        }
    }

    /// Records what the store said the tenant's placement is.
    pub fn learn(&self, tenant: &str, placement: Option<Placement>) {
        let mut map = self.by_tenant.lock().unwrap_or_else(|p| p.into_inner());
        let newer = match (map.get(tenant), &placement) {
            (Some(Some(known)), Some(new)) => new.epoch >= known.epoch,
            _ => true,
        };
        if newer {
            map.insert(tenant.to_owned(), placement);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(home: &str, epoch: u64) -> Placement {
        Placement {
            home: home.into(),
            standbys: vec![],
            epoch,
            preferred_home: home.into(),
        }
    }

    #[test]
    fn an_older_answer_never_replaces_a_newer_belief() {
        let beliefs = PlacementBeliefs::default();
        assert_eq!(beliefs.belief("acme"), Belief::Unknown);
        beliefs.learn("acme", Some(placement("us-east", 3)));
        beliefs.learn("acme", Some(placement("eu-west", 2)));
        assert_eq!(beliefs.belief("acme"), Belief::Epoch(3));
        beliefs.learn("other", None);
        assert_eq!(beliefs.belief("other"), Belief::Epoch(0));
    }
}
