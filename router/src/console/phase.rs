//! Where a region stands in the failover state machine, as the console
//! shows it: derived from this router's health counters, the region status
//! routers publish in raft-store, and where the region's own tenants live.
//!
//! ```text
//!  healthy ──a check fails──► suspect ──N rounds fail──► down
//!     ▲                          │ a check passes           │ tenants moved to standbys
//!     │                          ▼                          ▼
//!     │                       healthy                   failed-over
//!     │                                                     │ checks pass again
//!     │                                                     ▼
//!     └──── POST /admin/failback ──── awaiting-failback ◄── recovering (M rounds)
//! ```

use once_store_client::command::RegionStatus;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Up, nothing failing, its tenants at home.
    Healthy,
    /// Up, but the latest checks failed (not yet down).
    Suspect,
    /// Down, and some of its tenants are still placed there: the failover
    /// has not happened (yet, or it could not: no healthy standby).
    Down,
    /// Down, and none of its tenants is served there.
    FailedOver,
    /// Down, and the latest checks pass: counting towards healthy.
    Recovering,
    /// Up again, but marked down in the store or with tenants elsewhere:
    /// waiting for an operator's failback.
    AwaitingFailback,
}

/// What the phase is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evidence {
    /// This router counts the region up.
    pub up: bool,
    pub consecutive_failures: u32,
    pub consecutive_successes: u32,
    /// What the routers published in raft-store (`None`: never published).
    pub published: Option<RegionStatus>,
    /// Tenants whose preferred home is this region.
    pub own_tenants: usize,
    /// Of those, how many are placed elsewhere now.
    pub own_tenants_away: usize,
}

impl Phase {
    pub fn of(e: Evidence) -> Self {
        let marked_down = e.published == Some(RegionStatus::Down);
        let all_away = e.own_tenants > 0 && e.own_tenants_away == e.own_tenants;
        if e.up {
            if e.consecutive_failures > 0 {
                Phase::Suspect
            } else if marked_down || e.own_tenants_away > 0 {
                Phase::AwaitingFailback
            } else {
                Phase::Healthy
            }
        } else if e.consecutive_successes > 0 {
            Phase::Recovering
        } else if all_away || (marked_down && e.own_tenants == 0) {
            Phase::FailedOver
        } else {
            Phase::Down
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence() -> Evidence {
        Evidence {
            up: true,
            consecutive_failures: 0,
            consecutive_successes: 7,
            published: Some(RegionStatus::Healthy),
            own_tenants: 2,
            own_tenants_away: 0,
        }
    }

    #[test]
    fn a_region_walks_the_whole_machine() {
        let healthy = evidence();
        assert_eq!(Phase::of(healthy), Phase::Healthy);
        let suspect = Evidence {
            consecutive_failures: 1,
            consecutive_successes: 0,
            ..healthy
        };
        assert_eq!(Phase::of(suspect), Phase::Suspect);
        let down = Evidence {
            up: false,
            consecutive_failures: 3,
            ..suspect
        };
        assert_eq!(Phase::of(down), Phase::Down);
        let half_moved = Evidence {
            published: Some(RegionStatus::Down),
            own_tenants_away: 1,
            ..down
        };
        assert_eq!(
            Phase::of(half_moved),
            Phase::Down,
            "a tenant is still there"
        );
        let failed_over = Evidence {
            own_tenants_away: 2,
            ..half_moved
        };
        assert_eq!(Phase::of(failed_over), Phase::FailedOver);
        let recovering = Evidence {
            consecutive_failures: 0,
            consecutive_successes: 2,
            ..failed_over
        };
        assert_eq!(Phase::of(recovering), Phase::Recovering);
        let back = Evidence {
            up: true,
            consecutive_successes: 5,
            ..recovering
        };
        assert_eq!(Phase::of(back), Phase::AwaitingFailback);
        let failed_back = Evidence {
            published: Some(RegionStatus::Healthy),
            own_tenants_away: 0,
            ..back
        };
        assert_eq!(Phase::of(failed_back), Phase::Healthy);
    }

    #[test]
    fn a_region_without_tenants_fails_over_once_published_down() {
        let empty = Evidence {
            up: false,
            consecutive_failures: 3,
            consecutive_successes: 0,
            published: Some(RegionStatus::Healthy),
            own_tenants: 0,
            own_tenants_away: 0,
        };
        assert_eq!(Phase::of(empty), Phase::Down);
        let published = Evidence {
            published: Some(RegionStatus::Down),
            ..empty
        };
        assert_eq!(Phase::of(published), Phase::FailedOver);
    }
}
