//! The router's audit trail of operator failbacks asked for from the
//! console ([`crate::console::failback`]): who asked, why, and what came of
//! it. A resolve's audit entry is written by a node in its database in the
//! verdict's transaction; a router has no database, so its trail is the
//! latest [`KEPT`] entries in memory, which the console shows, and one
//! `warn` log event per entry with every field, which is the copy that
//! outlives the process (docs/decisions/0080-console-failback-audit.md).

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::Serialize;

use crate::failover::now_ms;

/// How many failback requests the trail keeps.
pub const KEPT: usize = 50;

/// One failback requested from the console.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FailbackEntry {
    pub region: String,
    pub actor: String,
    pub reason: String,
    pub requested_at: u64,
    /// `failed back` or why not (`REGION_NOT_HEALTHY`, a store error).
    pub outcome: String,
    /// Tenants moved home.
    pub moved: usize,
}

/// The console's failback audit trail, newest first.
#[derive(Debug, Default)]
pub struct FailbackTrail {
    // A std mutex: held only to push or copy, never across an await.
    entries: Mutex<VecDeque<FailbackEntry>>,
}

impl FailbackTrail {
    /// Records `action`'s outcome (logged, and kept for the console).
    pub fn record(&self, region: &str, actor: &str, reason: &str, outcome: String, moved: usize) {
        tracing::warn!(
            %region,
            %actor,
            %reason,
            %outcome,
            moved,
            "console failback audited"
        );
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.push_front(FailbackEntry {
            region: region.to_owned(),
            actor: actor.to_owned(),
            reason: reason.to_owned(),
            requested_at: now_ms(),
            outcome,
            moved,
        });
        entries.truncate(KEPT);
    }

    pub fn entries(&self) -> Vec<FailbackEntry> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trail_keeps_the_newest_first_and_only_so_many() {
        let trail = FailbackTrail::default();
        for i in 0..KEPT + 3 {
            trail.record("eu-west", &format!("op{i}"), "why", "failed back".into(), 1);
        }
        let entries = trail.entries();
        assert_eq!(entries.len(), KEPT);
        assert_eq!(entries[0].actor, format!("op{}", KEPT + 2));
        assert_eq!(entries[KEPT - 1].actor, "op3");
    }
}
