//! Who should lead a home region's group, and who should be first to
//! campaign when its leader falls silent
//! (docs/decisions/0067-the-successor-campaigns-first.md).
//!
//! A home region's group wants its lead where its tenants live
//! ([`crate::housekeeping`] hands it there). When that region dies, the
//! router moves its tenants to their first standby, and the lead should
//! follow them there: a leader elsewhere costs every one of their writes a
//! round trip to it, until a hand-off — itself an election, with writes
//! held meanwhile — moves it. So the election timer ([`crate::leadership::election`])
//! lets the members of two regions campaign first: where the sampled
//! tenants live, and where they would go next. The others defer by a
//! heartbeat and the timeout's spread, long enough for a favoured
//! member's pre-vote to reach them first; as a voter that granted it, each
//! then starts no campaign of its own while that election runs. If no
//! favoured member is alive, the others campaign after the deferral:
//! slower, never stuck. A group with no placements to judge by, or whose
//! tenants have nowhere to go, favours every member, as before.

use std::sync::Arc;

use crate::command::Placement;
use crate::state_machine::StateMachine;
use crate::wan::SimulatedWan;

/// How many placements the group's residence is judged by, the first in
/// key order: every tenant homed in a region fails over and back together,
/// so a handful tells as much as all of them, and is read in microseconds.
pub const PLACEMENTS_SAMPLED: usize = 64;

/// Where a group's tenants live now, and where they would go if that
/// region failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Residence {
    /// The region most of the sampled placements are home in (ties to the
    /// first by name).
    pub home: String,
    /// The region most of those would fail over to: their first standby
    /// other than `home` (ties to the first by name); `None` when none
    /// has one.
    pub next: Option<String>,
}

impl Residence {
    /// Judged from `placements` (`None`: there are none).
    pub fn of(placements: &[Placement]) -> Option<Self> {
        let home = most_common(placements.iter().map(|p| p.home.clone()))?;
        let next = most_common(
            placements
                .iter()
                .filter(|p| p.home == home)
                .filter_map(|p| p.failover_target(&home, |_| true))
                .map(|(next, _)| next),
        );
        Some(Self { home, next })
    }

    /// What `state_machine` holds now.
    pub fn read(state_machine: &StateMachine) -> Result<Option<Self>, crate::types::StorageError> {
        Ok(Self::of(
            &state_machine.sampled_placements(PLACEMENTS_SAMPLED)?,
        ))
    }
}

/// The most common of `regions` (ties to the first by name).
fn most_common(regions: impl Iterator<Item = String>) -> Option<String> {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for region in regions {
        *counts.entry(region).or_default() += 1;
    }
    let most = counts.values().copied().max()?;
    counts
        .into_iter()
        .find(|(_, n)| *n == most)
        .map(|(region, _)| region)
}

/// Where a home region's group wants its lead: with its tenants.
#[derive(Debug, Clone)]
pub struct FollowTenants {
    /// The group's home region: where its lead goes while it has no
    /// placement to judge by.
    pub home: String,
    /// Which region each member is in.
    pub wan: Arc<SimulatedWan>,
}

/// Whether this member of a home region's group campaigns without
/// deferring.
#[derive(Debug, Clone)]
pub struct Succession {
    pub state_machine: StateMachine,
    pub follow: FollowTenants,
}

impl Succession {
    /// Whether this member is in the region where the group's tenants live
    /// or in the one they would go to next; every member is when there is
    /// nothing to judge by (no placements, no next region, an unreadable
    /// state machine).
    pub fn favours_this_member(&self) -> bool {
        let residence = match Residence::read(&self.state_machine) {
            Ok(residence) => residence,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read where the group's tenants live");
                return true;
            }
        };
        let Some(Residence {
            home,
            next: Some(next),
        }) = residence
        else {
            return true;
        };
        let here = self.follow.wan.region();
        here == home || here == next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(home: &str, standbys: &[&str]) -> Placement {
        Placement {
            home: home.into(),
            standbys: standbys.iter().map(|s| (*s).into()).collect(),
            epoch: 1,
            preferred_home: home.into(),
        }
    }

    #[test]
    fn a_groups_tenants_live_where_most_are_home_and_go_where_most_would_fail_over() {
        assert_eq!(Residence::of(&[]), None);
        let residence = Residence::of(&[
            placed("eu", &["us", "ap"]),
            placed("eu", &["ap", "us"]),
            placed("eu", &["us"]),
            // Home elsewhere: not counted for where eu's tenants go.
            placed("ap", &["ap", "ap"]),
        ]);
        assert_eq!(
            residence,
            Some(Residence {
                home: "eu".into(),
                next: Some("us".into())
            })
        );
        // A standby naming the home itself is passed over; ties go to the
        // first name.
        assert_eq!(
            Residence::of(&[placed("eu", &["eu", "us"]), placed("eu", &["ap"])]),
            Some(Residence {
                home: "eu".into(),
                next: Some("ap".into())
            })
        );
        assert_eq!(
            Residence::of(&[placed("eu", &[])]),
            Some(Residence {
                home: "eu".into(),
                next: None
            })
        );
    }
}
