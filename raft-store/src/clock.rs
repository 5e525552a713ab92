//! Leader-stamped time (DESIGN §5; docs/decisions/0033-leader-stamped-time.md):
//! the one clock that decides leases, takeovers and expiry is the leader's,
//! and a leader stamps only while its clock agrees with a majority of the
//! voters.
//!
//! Every Raft RPC carries the sender's wall clock ([`CLOCK_HEADER`]) and its
//! member id ([`MEMBER_HEADER`]), and every answer the responder's clock. A
//! member keeps the latest [`Sample`] per peer: the peer's clock and the
//! local monotonic instant it was read at, so the peer's clock *now* is
//! predicted without trusting the local wall clock not to jump. An answer's
//! sample is good to half its round trip; a request's sample to its one-way
//! delay, which [`ClockGuard::max_offset`] must dwarf.
//!
//! - **The leader stamps** ([`ClockGuard::stamp`]): its wall clock, never
//!   below its last stamp, once fresh samples show it within
//!   `max_offset` of a majority of the voters (itself included). A leader
//!   that has not heard from enough voters yet waits for their answers
//!   (briefly, bounded); a leader that a majority disagrees with stamps
//!   nothing, so every write is refused and retried elsewhere.
//! - **It then steps down** ([`ClockGuard::run`]): it stops its heartbeats
//!   and its own campaigns ([`ClockGuard::may_campaign`]), so the
//!   followers' election timers fire and a member with a good clock takes
//!   over. Its heartbeats tell followers
//!   whether it agrees with a quorum ([`QUORUM_HEADER`]).
//! - **A member that knows it is the odd one out never campaigns**: a
//!   follower whose clock disagrees with a leader that vouches for its own
//!   clock, or with a majority of the voters it has samples of, does not
//!   campaign until its clock agrees again.
//! - **Voters refuse a candidate whose clock disagrees with theirs**
//!   ([`ClockGuard::refuses_vote`]), unless they know themselves to be the
//!   odd one out; so a member with a wrong clock cannot win an election,
//!   and every leader starts with a clock a majority has just checked.
//!
//! Without a majority of agreeing clocks there is no leader that stamps,
//! and the store refuses writes rather than decide leases by a clock it
//! cannot check.
//!
//! The same samples say when each peer was last heard from, so they also
//! answer whether this member hears a leader that holds a quorum
//! ([`ClockGuard::since_leader_heard`], in `/api/status`): what a node's
//! readiness asks of the nearest member (decision 0058).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use openraft::ServerState;
use tokio::sync::Notify;

use crate::command::Millis;
use crate::types::{NodeId, Raft};

/// The sender's wall clock, in milliseconds since the Unix epoch, on every
/// Raft RPC request and answer.
pub const CLOCK_HEADER: &str = "x-once-clock";
/// The sending member's id, on every Raft RPC request.
pub const MEMBER_HEADER: &str = "x-once-member";
/// On a leader's requests: `1` while its clock agrees with a majority of
/// the voters, `0` when it does not.
pub const QUORUM_HEADER: &str = "x-once-clock-quorum";

/// This process's wall clock, in milliseconds since the Unix epoch.
pub fn wall_now() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// One reading of a peer's clock.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// The peer's clock when it wrote the header.
    pub peer_clock: Millis,
    /// The local monotonic instant the reading stands for.
    pub at: Instant,
    /// How far off the reading may be by transit alone.
    pub uncertainty: Duration,
    /// What the peer said, on its requests, of its own clock: that it
    /// agrees with a quorum (`Some(true)`) or not. Answers say nothing
    /// (`None`), and keep what the peer last said.
    pub vouched: Option<bool>,
}

impl Sample {
    /// The peer's clock minus ours, both predicted for `now` (`wall` is
    /// our wall clock at `now`).
    fn offset(&self, now: Instant, wall: Millis) -> i64 {
        let elapsed = now.saturating_duration_since(self.at).as_millis() as i64;
        self.peer_clock.saturating_add(elapsed) - wall
    }
}

/// What the samples say about this member's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A majority of the voters (this member included) agree with it.
    Agrees,
    /// Too few fresh samples to tell either way.
    Unknown,
    /// So many voters disagree that no majority can agree with it.
    Disagrees,
}

/// Why the leader stamped nothing.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ClockError {
    #[error(
        "this member's clock disagrees with a majority of the voters by more than {max_offset_ms} ms; it stamps no time and is stepping down"
    )]
    Disagrees { max_offset_ms: u64 },
    #[error("this member could not check its clock against a majority of the voters in time")]
    Unconfirmed,
}

/// A member's view of its own clock against its peers'; shared by the Raft
/// RPC sender and receiver, group commit and the watcher task.
#[derive(Debug)]
pub struct ClockGuard {
    id: NodeId,
    /// Added to the wall clock: zero, except in test builds, where the
    /// scenario tests move every member's clock forward together
    /// (`/admin/clock/advance`, `failpoints` feature only). One per
    /// process: every group a member hosts reads the same clock
    /// ([`ClockGuard::sharing_clock_with`]).
    shift_ms: Arc<std::sync::atomic::AtomicI64>,
    max_offset: Duration,
    /// Samples older than this say nothing.
    fresh_for: Duration,
    /// How long a stamp may wait for samples.
    confirm_within: Duration,
    state: Mutex<State>,
    sampled: Notify,
    /// Set by [`ClockGuard::run`] while this member must not campaign: a
    /// leader stepping down, a follower that is the odd one out. Read by
    /// the election timer ([`crate::leadership::election`]).
    barred: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    samples: BTreeMap<NodeId, Sample>,
    last_stamp: Millis,
    /// The voters and the leader as of the watcher's last look.
    voters: BTreeSet<NodeId>,
    leader: Option<NodeId>,
}

impl ClockGuard {
    /// `heartbeat` sets how fresh a sample must be (a few heartbeats) and
    /// how long a new leader waits for its first answers.
    pub fn new(id: NodeId, max_offset: Duration, heartbeat: Duration) -> Self {
        Self {
            id,
            shift_ms: Arc::default(),
            max_offset,
            fresh_for: (heartbeat * 10).max(Duration::from_secs(2)),
            confirm_within: (heartbeat * 4).max(Duration::from_millis(500)),
            state: Mutex::new(State::default()),
            sampled: Notify::new(),
            barred: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// This guard reading the same clock as `other`: the guards of the
    /// groups one member hosts, whose process has one clock.
    pub fn sharing_clock_with(mut self, other: &ClockGuard) -> Self {
        self.shift_ms = other.shift_ms.clone();
        self
    }

    pub fn max_offset(&self) -> Duration {
        self.max_offset
    }

    /// This member's clock: its wall clock (moved forward by the tests'
    /// time travel, in test builds).
    pub fn now(&self) -> Millis {
        wall_now().saturating_add(self.shift_ms.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Moves this member's clock forward by `by_ms` (test builds only).
    #[cfg(feature = "failpoints")]
    pub fn advance(&self, by_ms: i64) {
        self.shift_ms
            .fetch_add(by_ms, std::sync::atomic::Ordering::SeqCst);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the RPC handlers judge by: the current voters and leader (kept
    /// up to date by [`Self::run`]).
    pub fn set_view(&self, voters: BTreeSet<NodeId>, leader: Option<NodeId>) {
        {
            let mut state = self.lock();
            state.voters = voters;
            state.leader = leader;
        }
        self.sampled.notify_waiters();
    }

    fn view(&self) -> (BTreeSet<NodeId>, Option<NodeId>) {
        let state = self.lock();
        (state.voters.clone(), state.leader)
    }

    /// Records a reading of `peer`'s clock.
    pub fn record(&self, peer: NodeId, sample: Sample) {
        if peer == self.id {
            return;
        }
        {
            let mut state = self.lock();
            let said = sample
                .vouched
                .or_else(|| state.samples.get(&peer).and_then(|s| s.vouched));
            state.samples.insert(
                peer,
                Sample {
                    vouched: said,
                    ..sample
                },
            );
        }
        self.sampled.notify_waiters();
    }

    /// Whether `peer`'s clock, by its latest fresh sample, agrees with
    /// ours; `None` without one.
    fn agrees_with(&self, state: &State, peer: NodeId, now: Instant, wall: Millis) -> Option<bool> {
        let s = state.samples.get(&peer)?;
        if now.saturating_duration_since(s.at) > self.fresh_for {
            return None;
        }
        let bound = (self.max_offset + s.uncertainty).as_millis() as i64;
        Some(s.offset(now, wall).abs() <= bound)
    }

    /// Judges this member's clock against `voters`.
    pub fn verdict(&self, voters: &BTreeSet<NodeId>) -> Verdict {
        let state = self.lock();
        self.verdict_of(&state, voters, Instant::now(), self.now())
    }

    /// Judges `wall`, this member's clock read at `now`, against `voters`.
    fn verdict_of(
        &self,
        state: &State,
        voters: &BTreeSet<NodeId>,
        now: Instant,
        wall: Millis,
    ) -> Verdict {
        if voters.is_empty() {
            return Verdict::Unknown;
        }
        let majority = voters.len() / 2 + 1;
        let (mut agree, mut unknown) = (0, 0);
        for &voter in voters {
            if voter == self.id {
                agree += 1;
                continue;
            }
            match self.agrees_with(state, voter, now, wall) {
                Some(true) => agree += 1,
                Some(false) => {}
                None => unknown += 1,
            }
        }
        if agree >= majority {
            Verdict::Agrees
        } else if agree + unknown >= majority {
            Verdict::Unknown
        } else {
            Verdict::Disagrees
        }
    }

    /// How long ago this member last had word that `leader` holds a quorum
    /// of `voters`, from the samples every Raft RPC leaves in both
    /// directions: as the leader, since a majority of the voters (itself
    /// included) had last answered or called it; as a follower, since its
    /// last RPC from or to the leader. `None` without a leader, or before
    /// enough of them were heard. What a member says of the store's reach
    /// from its region without a round trip through the leader
    /// (docs/decisions/0058-store-readiness-from-the-nearest-member.md).
    pub fn since_leader_heard(
        &self,
        voters: &BTreeSet<NodeId>,
        leader: Option<NodeId>,
    ) -> Option<Duration> {
        let leader = leader?;
        let now = Instant::now();
        let state = self.lock();
        let age = |peer: &NodeId| {
            if *peer == self.id {
                Some(Duration::ZERO)
            } else {
                state
                    .samples
                    .get(peer)
                    .map(|s| now.saturating_duration_since(s.at))
            }
        };
        if leader != self.id {
            return age(&leader);
        }
        let mut ages: Vec<Duration> = voters.iter().filter_map(age).collect();
        ages.sort_unstable();
        ages.get(voters.len() / 2).copied()
    }

    /// How long ago each peer was last heard from, by any Raft RPC in
    /// either direction: what this member says of its peers' liveness
    /// from the store's side (`peers_heard_ms_ago` in `/api/status`; a
    /// router corroborates a region's failed health checks with it,
    /// docs/decisions/0085-a-region-is-down-on-evidence-that-survives-load.md).
    pub fn peers_heard(&self) -> BTreeMap<NodeId, Duration> {
        let now = Instant::now();
        self.lock()
            .samples
            .iter()
            .map(|(peer, s)| (*peer, now.saturating_duration_since(s.at)))
            .collect()
    }

    /// Whether this member knows its clock is the odd one out: a majority
    /// disagrees, or a leader that vouches for its own clock does.
    pub fn is_odd_one_out(&self, voters: &BTreeSet<NodeId>, leader: Option<NodeId>) -> bool {
        if self.verdict(voters) == Verdict::Disagrees {
            return true;
        }
        let Some(leader) = leader.filter(|l| *l != self.id) else {
            return false;
        };
        let (now, wall) = (Instant::now(), self.now());
        let state = self.lock();
        let vouched = state
            .samples
            .get(&leader)
            .is_some_and(|s| s.vouched == Some(true));
        vouched && self.agrees_with(&state, leader, now, wall) == Some(false)
    }

    /// Whether to refuse a vote to a candidate whose request carried
    /// `sample`: its clock disagrees with ours, and ours is not known to be
    /// the odd one out.
    pub fn refuses_vote(
        &self,
        sample: &Sample,
        voters: &BTreeSet<NodeId>,
        leader: Option<NodeId>,
    ) -> bool {
        let bound = (self.max_offset + sample.uncertainty).as_millis() as i64;
        sample.offset(Instant::now(), self.now()).abs() > bound
            && !self.is_odd_one_out(voters, leader)
    }

    /// The time to stamp on the next batch: this member's wall clock, never
    /// below its last stamp, once a majority of `voters` agrees with it.
    /// Waits up to a few heartbeats for samples when it cannot tell yet.
    ///
    /// The reading stamped is the reading judged, under one lock: read
    /// again after the verdict, a clock that jumped in between would be
    /// stamped unchecked.
    pub async fn stamp(&self, voters: &BTreeSet<NodeId>) -> Result<Millis, ClockError> {
        self.stamp_against(Some(voters)).await
    }

    /// [`Self::stamp`] against `voters`, or (`None`) against the current
    /// view, read again on every try: a leader elected moments ago may ask
    /// before [`Self::run`] has given it the voters, and judged against
    /// that empty view it waited out `confirm_within` (1.2 s with the
    /// default timing) on a fresh cluster's first write.
    async fn stamp_against(&self, voters: Option<&BTreeSet<NodeId>>) -> Result<Millis, ClockError> {
        let deadline = tokio::time::Instant::now() + self.confirm_within;
        loop {
            let sampled = self.sampled.notified();
            {
                let mut state = self.lock();
                let (now, wall) = (Instant::now(), self.now());
                let verdict = self.verdict_of(&state, voters.unwrap_or(&state.voters), now, wall);
                match verdict {
                    Verdict::Agrees => {
                        state.last_stamp = state.last_stamp.max(wall);
                        return Ok(state.last_stamp);
                    }
                    Verdict::Disagrees => {
                        return Err(ClockError::Disagrees {
                            max_offset_ms: self.max_offset.as_millis() as u64,
                        });
                    }
                    Verdict::Unknown => {}
                }
            }
            if tokio::time::timeout_at(deadline, sampled).await.is_err() {
                return Err(ClockError::Unconfirmed);
            }
        }
    }

    /// The offsets of the fresh samples (peer minus this member, in ms),
    /// for status and logs.
    pub fn offsets(&self) -> BTreeMap<NodeId, i64> {
        let (now, wall) = (Instant::now(), self.now());
        self.lock()
            .samples
            .iter()
            .filter(|(_, s)| now.saturating_duration_since(s.at) <= self.fresh_for)
            .map(|(id, s)| (*id, s.offset(now, wall)))
            .collect()
    }

    /// Whether this member's clock lets it campaign (module docs): not while
    /// it steps down as a leader whose clock a majority disagrees with, nor
    /// while it knows itself to be the odd one out.
    pub fn may_campaign(&self) -> bool {
        !self.barred.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn bar_campaigns(&self, barred: bool) {
        self.barred
            .store(barred, std::sync::atomic::Ordering::Relaxed);
    }

    /// Keeps this member's leadership and elections in line with its clock
    /// (module docs), checking every `every` until the Raft core stops.
    pub async fn run(self: std::sync::Arc<Self>, raft: Raft, every: Duration) {
        let metrics = raft.metrics();
        let mut stepping_down = false;
        let mut odd = false;
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // The core owns the sending half: gone, the member is stopping.
            if metrics.has_changed().is_err() {
                return;
            }
            let (state, leader, voters) = {
                let m = metrics.borrow();
                let voters: BTreeSet<NodeId> =
                    m.membership_config.membership().voter_ids().collect();
                (m.state, m.current_leader, voters)
            };
            self.set_view(voters.clone(), leader);
            if state == ServerState::Leader {
                let disagrees = self.verdict(&voters) == Verdict::Disagrees;
                if disagrees != stepping_down {
                    stepping_down = disagrees;
                    if disagrees {
                        tracing::error!(
                            id = self.id,
                            offsets_ms = ?self.offsets(),
                            max_offset_ms = self.max_offset.as_millis() as u64,
                            "this leader's clock disagrees with a majority of the voters: stamping nothing and stepping down"
                        );
                    }
                    raft.runtime_config().heartbeat(!disagrees);
                    self.bar_campaigns(disagrees);
                }
            } else {
                if stepping_down {
                    stepping_down = false;
                    raft.runtime_config().heartbeat(true);
                    // A follower now: only its own clock's standing bars it.
                    self.bar_campaigns(odd);
                }
                let now_odd = self.is_odd_one_out(&voters, leader);
                if now_odd != odd {
                    odd = now_odd;
                    if odd {
                        tracing::error!(
                            id = self.id,
                            offsets_ms = ?self.offsets(),
                            max_offset_ms = self.max_offset.as_millis() as u64,
                            "this member's clock disagrees with the cluster's: it will not campaign until it agrees"
                        );
                    } else {
                        tracing::info!(
                            id = self.id,
                            "this member's clock agrees with the cluster's again"
                        );
                    }
                    self.bar_campaigns(odd);
                }
            }
        }
    }

    /// Whether this member agrees with a quorum of the current voters (the
    /// value of [`QUORUM_HEADER`] on its requests).
    pub fn vouches(&self) -> bool {
        let (voters, _) = self.view();
        !voters.is_empty() && self.verdict(&voters) == Verdict::Agrees
    }

    /// [`Self::refuses_vote`] against the current voters and leader.
    pub fn refuses_candidate(&self, sample: &Sample) -> bool {
        let (voters, leader) = self.view();
        self.refuses_vote(sample, &voters, leader)
    }

    /// [`Self::stamp`] against the current voters.
    pub async fn stamp_now(&self) -> Result<Millis, ClockError> {
        self.stamp_against(None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_millis(500);

    fn guard() -> ClockGuard {
        ClockGuard::new(1, MAX, Duration::from_millis(100))
    }

    fn sample(offset_ms: i64) -> Sample {
        Sample {
            peer_clock: wall_now() + offset_ms,
            at: Instant::now(),
            uncertainty: Duration::ZERO,
            vouched: None,
        }
    }

    /// A true-clock sample read `ago` before now; `None` where the
    /// monotonic clock cannot go back that far.
    fn sample_taken(ago: Duration) -> Option<Sample> {
        Some(Sample {
            at: Instant::now().checked_sub(ago)?,
            ..sample(0)
        })
    }

    fn voters(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_follower_hears_the_leader_and_a_leader_its_quorum() {
        let g = guard();
        let three = voters(&[1, 2, 3]);
        assert_eq!(g.since_leader_heard(&three, None), None, "no leader");
        assert_eq!(g.since_leader_heard(&three, Some(2)), None, "not heard");
        assert_eq!(
            g.since_leader_heard(&three, Some(1)),
            None,
            "a leader no voter answered"
        );
        let Some(long_ago) = sample_taken(Duration::from_secs(5)) else {
            return;
        };
        g.record(2, long_ago);
        let heard = |leader| g.since_leader_heard(&three, Some(leader)).unwrap();
        assert!(heard(2) >= Duration::from_secs(5), "a follower's leader");
        assert!(heard(1) >= Duration::from_secs(5), "the leader's quorum");
        g.record(3, sample(0));
        assert!(
            heard(1) < Duration::from_secs(1),
            "one fresh voter is enough"
        );
        assert!(heard(2) >= Duration::from_secs(5), "3 is not the leader");
    }

    #[test]
    fn every_peer_heard_is_told_with_its_age_and_one_never_heard_is_not() {
        let g = guard();
        assert!(g.peers_heard().is_empty());
        let Some(long_ago) = sample_taken(Duration::from_secs(5)) else {
            return;
        };
        g.record(2, long_ago);
        g.record(3, sample(0));
        g.record(1, sample(0));
        let heard = g.peers_heard();
        assert!(heard[&2] >= Duration::from_secs(5), "{heard:?}");
        assert!(heard[&3] < Duration::from_secs(1), "{heard:?}");
        assert!(!heard.contains_key(&1), "itself: never a peer");
        assert_eq!(heard.len(), 2);
    }

    #[test]
    fn a_lone_voter_always_agrees_with_itself() {
        assert_eq!(guard().verdict(&voters(&[1])), Verdict::Agrees);
    }

    #[test]
    fn a_majority_of_agreeing_clocks_is_needed() {
        let g = guard();
        let three = voters(&[1, 2, 3]);
        assert_eq!(g.verdict(&three), Verdict::Unknown, "no samples yet");
        g.record(2, sample(7_200_000));
        assert_eq!(g.verdict(&three), Verdict::Unknown, "3 unknown");
        g.record(3, sample(-40));
        assert_eq!(g.verdict(&three), Verdict::Agrees);
        g.record(3, sample(-7_200_000));
        assert_eq!(g.verdict(&three), Verdict::Disagrees);
    }

    #[test]
    fn the_uncertainty_of_a_sample_widens_the_bound() {
        let g = guard();
        let two = voters(&[1, 2]);
        g.record(2, sample(700));
        assert_eq!(g.verdict(&two), Verdict::Disagrees);
        g.record(
            2,
            Sample {
                uncertainty: Duration::from_millis(250),
                ..sample(700)
            },
        );
        assert_eq!(g.verdict(&two), Verdict::Agrees);
    }

    #[test]
    fn stale_samples_say_nothing() {
        let g = guard();
        let Some(old) = sample_taken(Duration::from_secs(60)) else {
            return;
        };
        g.record(2, old);
        assert_eq!(g.verdict(&voters(&[1, 2])), Verdict::Unknown);
        assert!(g.offsets().is_empty());
    }

    #[test]
    fn a_follower_that_disagrees_with_a_vouching_leader_is_the_odd_one_out() {
        let g = guard();
        let three = voters(&[1, 2, 3]);
        g.record(2, sample(3_600_000));
        assert!(
            !g.is_odd_one_out(&three, Some(2)),
            "the leader does not vouch"
        );
        g.record(
            2,
            Sample {
                vouched: Some(true),
                ..sample(3_600_000)
            },
        );
        assert!(g.is_odd_one_out(&three, Some(2)));
        assert!(!g.is_odd_one_out(&three, Some(3)), "another leader");
    }

    #[test]
    fn votes_are_refused_to_candidates_with_wrong_clocks_unless_this_member_is_odd() {
        let g = guard();
        let three = voters(&[1, 2, 3]);
        assert!(g.refuses_vote(&sample(3_600_000), &three, None));
        assert!(!g.refuses_vote(&sample(100), &three, None));
        g.record(2, sample(-3_600_000));
        g.record(3, sample(-3_600_000));
        assert!(
            !g.refuses_vote(&sample(-3_600_000), &three, None),
            "a member outvoted on its clock defers to the others"
        );
    }

    #[tokio::test]
    async fn stamps_never_go_back_and_wait_for_a_confirmation() {
        let g = std::sync::Arc::new(guard());
        let two = voters(&[1, 2]);
        let waiting = {
            let (g, two) = (g.clone(), two.clone());
            tokio::spawn(async move { g.stamp(&two).await })
        };
        tokio::task::yield_now().await;
        g.record(2, sample(0));
        let first = waiting.await.unwrap().unwrap();
        let second = g.stamp(&two).await.unwrap();
        assert!(second >= first);
        g.lock().last_stamp = first + 60_000;
        assert_eq!(g.stamp(&two).await.unwrap(), first + 60_000);
    }

    #[tokio::test]
    async fn a_new_leaders_first_stamp_judges_the_voters_it_is_given_meanwhile() {
        let g = std::sync::Arc::new(guard());
        g.record(2, sample(0));
        // Asked before the view names any voter.
        let waiting = {
            let g = g.clone();
            tokio::spawn(async move { g.stamp_now().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        g.set_view(voters(&[1, 2]), Some(1));
        // Judged against the empty view it was asked under, it would wait
        // out `confirm_within` and be refused as unconfirmed.
        assert!(waiting.await.unwrap().is_ok());
    }

    #[tokio::test]
    async fn a_stamp_without_confirmation_is_refused() {
        let g = guard();
        assert_eq!(
            g.stamp(&voters(&[1, 2])).await,
            Err(ClockError::Unconfirmed)
        );
        g.record(2, sample(-3_600_000));
        assert!(matches!(
            g.stamp(&voters(&[1, 2])).await,
            Err(ClockError::Disagrees { .. })
        ));
    }
}
