//! This router's view of each region's health, fed by the health checker.
//!
//! A region is *down* after `failures` consecutive rounds in which every
//! one of its nodes failed `/readyz`, **on evidence that survives a loaded
//! machine** (docs/decisions/0085-a-region-is-down-on-evidence-that-survives-load.md):
//! the last round's failure was sure ([`Evidence`]: every node refused the
//! connection, or the region is cut off from this router), or raft-store says the region's member is
//! gone ([`crate::store_view`]), or the rounds have failed for
//! `unconfirmed_after` without either. A ready answer that comes after its
//! round judged it (a check outlives its round) ends the failing streak as
//! a good round would: a node that answers late is busy, not gone. A
//! streak that reaches `failures` rounds without evidence is *withheld*:
//! counted, logged once, not acted on.
//!
//! It is *up* again after `successes` consecutive good rounds. The view is
//! local to this router; the store's region status is where routers
//! publish their verdicts.
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
    /// The region just crossed the failure threshold, on this evidence.
    WentDown(Evidence),
    /// The region's rounds crossed the failure threshold with no evidence
    /// that it is gone: not declared down (once per failing streak).
    Withheld,
    /// A down region just crossed the success threshold.
    CameBack,
}

/// What a region is declared down on: evidence a busy node or a starved
/// router does not produce (decision 0085).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Evidence {
    /// Every node refused the connection: nothing listens there.
    NothingListens,
    /// An operator or a drill cut the region off from this router.
    CutOff,
    /// No other raft-store member has heard the region's member for a
    /// lease, by words asked since the streak began.
    StoreLostItsMember,
    /// None of the above, but the rounds have failed for
    /// `unconfirmed_after`.
    FailedLong,
}

impl Evidence {
    /// The `evidence` label of `router_region_down_declarations_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NothingListens => "nothing_listens",
            Self::CutOff => "cut_off",
            Self::StoreLostItsMember => "store_lost_its_member",
            Self::FailedLong => "failed_long",
        }
    }
}

/// One round of a region's checks, as the health checker judged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// A node was ready (or the store, not the region, is what is out).
    Passed,
    /// Every node failed: `Some` when the failure itself is sure evidence
    /// (every node refused, the region cut off), `None` when it may be a
    /// busy machine (no answer in time, a `503` of the node's own).
    Failed(Option<Evidence>),
}

#[derive(Debug, Clone, Copy)]
struct RegionState {
    down: bool,
    consecutive_failures: u32,
    consecutive_successes: u32,
    /// When the first round of the current failing streak started.
    failing_since: Option<Instant>,
    /// Whether this streak was already reported withheld.
    withheld: bool,
    /// When it was last counted up: the router's start, or its comeback.
    up_since: Instant,
}

impl RegionState {
    fn up_now() -> Self {
        Self {
            down: false,
            consecutive_failures: 0,
            consecutive_successes: 0,
            failing_since: None,
            withheld: false,
            up_since: Instant::now(),
        }
    }

    fn end_streak(&mut self) {
        self.consecutive_failures = 0;
        self.failing_since = None;
        self.withheld = false;
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

    /// Records one round of checks of `region`, started at `started`.
    /// `store_lost(since)` asks raft-store's view whether the region's
    /// member is gone by words asked since `since` (the streak's start);
    /// it is asked only when the threshold is reached on no sure evidence.
    pub fn record(
        &self,
        region: &str,
        started: Instant,
        round: Round,
        store_lost: impl FnOnce(Instant) -> bool,
    ) -> (Verdict, u32) {
        let mut states = self.lock();
        let state = states
            .entry(region.to_owned())
            .or_insert_with(RegionState::up_now);
        let sure = match round {
            Round::Passed => {
                state.end_streak();
                state.consecutive_successes = state.consecutive_successes.saturating_add(1);
                if state.down && state.consecutive_successes >= self.thresholds.successes {
                    state.down = false;
                    state.up_since = Instant::now();
                    return (Verdict::CameBack, 0);
                }
                return (Verdict::Unchanged, 0);
            }
            Round::Failed(sure) => sure,
        };
        state.consecutive_successes = 0;
        state.consecutive_failures = state.consecutive_failures.saturating_add(1);
        let since = *state.failing_since.get_or_insert(started);
        let failures = state.consecutive_failures;
        if state.down || failures < self.thresholds.failures {
            return (Verdict::Unchanged, failures);
        }
        let evidence = sure
            .or_else(|| store_lost(since).then_some(Evidence::StoreLostItsMember))
            .or_else(|| {
                (started.saturating_duration_since(since) >= self.thresholds.unconfirmed_after)
                    .then_some(Evidence::FailedLong)
            });
        match evidence {
            Some(evidence) => {
                state.down = true;
                (Verdict::WentDown(evidence), failures)
            }
            None if !state.withheld => {
                state.withheld = true;
                (Verdict::Withheld, failures)
            }
            None => (Verdict::Unchanged, failures),
        }
    }

    /// A ready answer from one of `region`'s nodes that came after its
    /// round judged it failed: the node answered while the region was
    /// failing, so it is busy, not gone, and the failing streak ends
    /// (whichever round the check was of: a node answering every check
    /// late answers older rounds' checks during a newer streak). Whether a
    /// down region comes back is still for whole rounds to say.
    pub fn answered_late(&self, region: &str) {
        let mut states = self.lock();
        if let Some(state) = states.get_mut(region)
            && !state.down
        {
            state.end_streak();
        }
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
                unconfirmed_after: Duration::from_secs(2),
            },
        )
    }

    /// A round whose every node refused: sure evidence.
    fn refused(h: &RegionHealth, region: &str) -> Verdict {
        let sure = Round::Failed(Some(Evidence::NothingListens));
        h.record(region, Instant::now(), sure, |_| false).0
    }

    fn passed(h: &RegionHealth, region: &str) -> Verdict {
        h.record(region, Instant::now(), Round::Passed, |_| false).0
    }

    /// A round whose checks all timed out, `at` the round's start.
    fn silent(h: &RegionHealth, region: &str, at: Instant, store_lost: bool) -> Verdict {
        h.record(region, at, Round::Failed(None), |_| store_lost).0
    }

    #[test]
    fn a_region_goes_down_after_the_failure_threshold_and_back_after_the_success_threshold() {
        let h = health();
        assert_eq!(refused(&h, "eu"), Verdict::Unchanged);
        assert_eq!(refused(&h, "eu"), Verdict::Unchanged);
        assert!(h.is_up("eu"));
        assert_eq!(
            refused(&h, "eu"),
            Verdict::WentDown(Evidence::NothingListens)
        );
        assert!(!h.is_up("eu"));
        assert_eq!(refused(&h, "eu"), Verdict::Unchanged);
        assert_eq!(passed(&h, "eu"), Verdict::Unchanged);
        assert_eq!(passed(&h, "eu"), Verdict::CameBack);
        assert!(h.is_up("eu"));
        assert!(!h.is_up("ap"), "unknown regions are never failover targets");
    }

    #[test]
    fn rounds_that_only_timed_out_are_withheld_until_the_store_says_the_member_is_gone_or_they_last()
     {
        let h = health();
        let t0 = Instant::now();
        let round = |n: u32| t0 + Duration::from_millis(200) * n;
        assert_eq!(silent(&h, "us", round(0), false), Verdict::Unchanged);
        assert_eq!(silent(&h, "us", round(1), false), Verdict::Unchanged);
        // The threshold, on nothing but timeouts, while the store hears
        // the region's member: withheld, once.
        assert_eq!(silent(&h, "us", round(2), false), Verdict::Withheld);
        assert_eq!(silent(&h, "us", round(3), false), Verdict::Unchanged);
        assert!(h.is_up("us"));
        // The store loses the member: down at once.
        assert_eq!(
            silent(&h, "us", round(4), true),
            Verdict::WentDown(Evidence::StoreLostItsMember)
        );

        // With the store hearing it throughout, down once the rounds have
        // failed for `unconfirmed_after` (2 s: the eleventh round).
        for n in 0..10 {
            assert_ne!(
                silent(&h, "eu", round(n), false),
                Verdict::WentDown(Evidence::FailedLong)
            );
        }
        assert_eq!(
            silent(&h, "eu", round(10), false),
            Verdict::WentDown(Evidence::FailedLong)
        );
    }

    #[test]
    fn the_store_is_asked_from_the_streaks_first_round() {
        let h = health();
        let t0 = Instant::now();
        for n in 0..3 {
            h.record(
                "us",
                t0 + Duration::from_millis(200) * n,
                Round::Failed(None),
                |since| {
                    assert_eq!(since, t0, "words asked since the first failed round");
                    false
                },
            );
        }
    }

    #[test]
    fn a_late_ready_answer_ends_the_failing_streak() {
        let h = health();
        let t0 = Instant::now();
        let round = |n: u32| t0 + Duration::from_millis(200) * n;
        silent(&h, "us", round(0), false);
        silent(&h, "us", round(1), false);
        // A check answers ready after its round: the node is busy.
        h.answered_late("us");
        assert_eq!(silent(&h, "us", round(2), false), Verdict::Unchanged);
        assert_eq!(silent(&h, "us", round(3), false), Verdict::Unchanged);
        assert_eq!(
            silent(&h, "us", round(4), true),
            Verdict::WentDown(Evidence::StoreLostItsMember)
        );
        // It says nothing of a region already down.
        h.answered_late("us");
        assert!(!h.is_up("us"));
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
                unconfirmed_after: Duration::from_secs(2),
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
            refused(&h, "eu");
            refused(&h, "us");
        }
        assert_eq!(passed(&h, "eu"), Verdict::CameBack);
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
                unconfirmed_after: Duration::from_secs(2),
            },
        );
        refused(&h, "eu");
        assert_eq!(passed(&h, "eu"), Verdict::CameBack);
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
        refused(&h, "us");
        refused(&h, "us");
        passed(&h, "us");
        assert_eq!(refused(&h, "us"), Verdict::Unchanged);
        assert_eq!(refused(&h, "us"), Verdict::Unchanged);
        assert_eq!(
            refused(&h, "us"),
            Verdict::WentDown(Evidence::NothingListens)
        );
    }
}
