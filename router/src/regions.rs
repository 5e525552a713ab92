//! This router's view of each region's health, fed by the health checker.
//!
//! A region is *down* after `failures` consecutive rounds in which every
//! one of its nodes failed `/readyz`, and *up* again after `successes`
//! consecutive good rounds. The view is local to this router; the store's
//! region status is where routers publish their verdicts.
//!
//! An automatic failover only moves tenants to a region that has been up
//! for a whole detection window (`failures` rounds), and at least `settle`
//! (3 s): one that just came back is no evidence that the failed region is
//! the one at fault. When raft-store has no leader for a few seconds, every
//! node's `/readyz` fails and every region goes down together; they come
//! back up to a few seconds apart (with 200 ms rounds, many rounds apart),
//! and without this rule the first one back would take the tenants of the
//! others, which were never really down.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::HealthConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing changed state.
    Unchanged,
    /// The region just crossed the failure threshold.
    WentDown,
    /// A down region just crossed the success threshold.
    CameBack,
}

#[derive(Debug, Clone, Copy)]
struct RegionState {
    down: bool,
    consecutive_failures: u32,
    consecutive_successes: u32,
    /// When it was last counted up: the router's start, or its comeback.
    up_since: Instant,
}

impl RegionState {
    fn up_now() -> Self {
        Self {
            down: false,
            consecutive_failures: 0,
            consecutive_successes: 0,
            up_since: Instant::now(),
        }
    }
}

/// One region as this router's health checks count it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionCheck {
    pub region: String,
    pub up: bool,
    pub consecutive_failures: u32,
    pub consecutive_successes: u32,
}

/// Health of every region named in `--nodes`.
#[derive(Debug)]
pub struct RegionHealth {
    thresholds: HealthConfig,
    /// A std mutex: held for a counter update, never across an await.
    states: Mutex<BTreeMap<String, RegionState>>,
}

impl RegionHealth {
    /// Every region starts up: a router that just started has no evidence
    /// against any of them, and failing over on no evidence moves tenants.
    pub fn new<'a>(regions: impl Iterator<Item = &'a str>, thresholds: HealthConfig) -> Self {
        Self {
            thresholds,
            states: Mutex::new(
                regions
                    .map(|r| (r.to_owned(), RegionState::up_now()))
                    .collect(),
            ),
        }
    }

    /// Records one round of checks of `region`.
    pub fn record(&self, region: &str, ok: bool) -> (Verdict, u32) {
        let mut states = self.lock();
        let state = states
            .entry(region.to_owned())
            .or_insert_with(RegionState::up_now);
        if ok {
            state.consecutive_failures = 0;
            state.consecutive_successes = state.consecutive_successes.saturating_add(1);
            if state.down && state.consecutive_successes >= self.thresholds.successes {
                state.down = false;
                state.up_since = Instant::now();
                return (Verdict::CameBack, 0);
            }
        } else {
            state.consecutive_successes = 0;
            state.consecutive_failures = state.consecutive_failures.saturating_add(1);
            if !state.down && state.consecutive_failures >= self.thresholds.failures {
                state.down = true;
                return (Verdict::WentDown, state.consecutive_failures);
            }
        }
        (Verdict::Unchanged, state.consecutive_failures)
    }

    /// Whether `region` is known and not down: a failover target.
    pub fn is_up(&self, region: &str) -> bool {
        self.lock().get(region).is_some_and(|s| !s.down)
    }

    /// Whether `region` may take tenants in an automatic failover: up, and
    /// up for a whole detection window and at least `settle` (module docs).
    pub fn is_settled_up(&self, region: &str) -> bool {
        let settled = self.detection_window().max(self.thresholds.settle);
        self.lock()
            .get(region)
            .is_some_and(|s| !s.down && s.up_since.elapsed() >= settled)
    }

    /// How long a region must fail before it is down.
    pub fn detection_window(&self) -> Duration {
        self.thresholds.interval * self.thresholds.failures
    }

    /// Every region this router checks.
    pub fn regions(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    pub fn down_regions(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, s)| s.down)
            .map(|(r, _)| r.clone())
            .collect()
    }

    /// Every region's counters, for the console.
    pub fn checks(&self) -> Vec<RegionCheck> {
        self.lock()
            .iter()
            .map(|(r, s)| RegionCheck {
                region: r.clone(),
                up: !s.down,
                consecutive_failures: s.consecutive_failures,
                consecutive_successes: s.consecutive_successes,
            })
            .collect()
    }

    /// `(region, up, consecutive failures)` for `/admin/placements`.
    pub fn snapshot(&self) -> Vec<(String, bool, u32)> {
        self.lock()
            .iter()
            .map(|(r, s)| (r.clone(), !s.down, s.consecutive_failures))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, RegionState>> {
        self.states.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn health() -> RegionHealth {
        RegionHealth::new(
            ["eu", "us"].into_iter(),
            HealthConfig {
                interval: Duration::from_secs(1),
                failures: 3,
                successes: 2,
                settle: Duration::ZERO,
            },
        )
    }

    #[test]
    fn a_region_goes_down_after_the_failure_threshold_and_back_after_the_success_threshold() {
        let h = health();
        assert_eq!(h.record("eu", false).0, Verdict::Unchanged);
        assert_eq!(h.record("eu", false).0, Verdict::Unchanged);
        assert!(h.is_up("eu"));
        assert_eq!(h.record("eu", false).0, Verdict::WentDown);
        assert!(!h.is_up("eu"));
        assert_eq!(h.record("eu", false).0, Verdict::Unchanged);
        assert_eq!(h.record("eu", true).0, Verdict::Unchanged);
        assert_eq!(h.record("eu", true).0, Verdict::CameBack);
        assert!(h.is_up("eu"));
        assert!(!h.is_up("ap"), "unknown regions are never failover targets");
    }

    #[test]
    fn a_region_that_just_came_back_takes_no_tenants_until_it_has_been_up_a_detection_window() {
        let h = RegionHealth::new(
            ["eu", "us"].into_iter(),
            HealthConfig {
                // Long enough that no scheduling pause between two
                // statements spans it.
                interval: Duration::from_millis(200),
                failures: 2,
                successes: 1,
                settle: Duration::ZERO,
            },
        );
        assert!(h.is_up("eu"));
        assert!(
            !h.is_settled_up("eu"),
            "a router that just started has no evidence"
        );
        std::thread::sleep(h.detection_window());
        assert!(h.is_settled_up("eu"));

        // Both down together (raft-store had no leader), eu back first.
        for _ in 0..2 {
            h.record("eu", false);
            h.record("us", false);
        }
        assert_eq!(h.record("eu", true).0, Verdict::CameBack);
        assert!(h.is_up("eu"));
        assert!(
            !h.is_settled_up("eu"),
            "just back: no proof that us is at fault"
        );
        std::thread::sleep(h.detection_window());
        assert!(
            h.is_settled_up("eu"),
            "up a whole window while us stayed down"
        );
        assert!(!h.is_settled_up("us"));
    }

    #[test]
    fn a_region_back_for_less_than_the_settle_time_takes_no_tenants_however_short_the_window() {
        let h = RegionHealth::new(
            ["eu", "us"].into_iter(),
            HealthConfig {
                interval: Duration::from_millis(1),
                failures: 1,
                successes: 1,
                // Long enough that no scheduling pause spans it.
                settle: Duration::from_millis(300),
            },
        );
        h.record("eu", false);
        assert_eq!(h.record("eu", true).0, Verdict::CameBack);
        std::thread::sleep(Duration::from_millis(10));
        assert!(
            !h.is_settled_up("eu"),
            "a detection window (1 ms) is past, the settle time is not"
        );
        std::thread::sleep(Duration::from_millis(300));
        assert!(h.is_settled_up("eu"));
    }

    #[test]
    fn one_success_resets_the_failure_count() {
        let h = health();
        h.record("us", false);
        h.record("us", false);
        h.record("us", true);
        assert_eq!(h.record("us", false).0, Verdict::Unchanged);
        assert_eq!(h.record("us", false).0, Verdict::Unchanged);
        assert_eq!(h.record("us", false).0, Verdict::WentDown);
    }
}
