//! Who starts an election, and when: raft-store's own election timer, with
//! a pre-vote (RELIABILITY.md, findings 4, 5 and 7).
//!
//! openraft 0.9 has half of what etcd calls pre-vote and check-quorum: a
//! member that heard its leader within `election_max` (the leader's lease)
//! grants no vote. It lacks the other half: a follower that stops hearing
//! the leader — cut off, paused, starved of CPU — starts elections it cannot
//! win, raising its term each time, and when it is heard again the leader
//! meets that term and steps down. So openraft's own timer is off
//! (`Config::enable_elect = false`) and this one decides instead:
//!
//! - **Silence.** A member campaigns only after `election_max` plus a
//!   random `0..(election_max - election_min)` with no word from a leader:
//!   openraft's vote time (an append from the leader, or a vote, renews it),
//!   or the end of this process's last stall, whichever is later. A stall is
//!   a tick of this timer that came more than a heartbeat late: the process
//!   did not run, so it cannot tell whether the leader was silent, and the
//!   silence is counted again from when it runs.
//! - **Pre-vote.** It then asks every other voter `would you vote for me,
//!   with this log, if I asked?` ([`crate::leadership::pre_vote::PREVOTE_PATH`]). A voter says yes only
//!   if it leads no one, has not heard a leader within the lease by the same
//!   count, its clock agrees with the candidate's (the Raft listener refuses
//!   the request otherwise, as it refuses a vote), and its log is not ahead
//!   of the candidate's. Only with a majority of every voter configuration
//!   (itself included) does the member start a real election
//!   (`Raft::trigger().elect()`); a refused pre-vote raises no term. The
//!   RPC's messages and the voter's answer are [`crate::leadership::pre_vote`]. A
//!   voter of the build before, which has no pre-vote, answers `404` and
//!   counts as a yes: its real vote, under the lease, decides as before.
//! - **One candidate at a time.** A member that granted a candidate's
//!   pre-vote starts no campaign of its own for `election_min`: that
//!   candidate's election is under way, and a second candidate would split
//!   the vote (two survivors of three, each voting for itself, elect no one
//!   and wait a whole lease again). While its own pre-vote is out, a member
//!   refuses the pre-vote of a candidate with an equal log and a higher id
//!   ([`PreVote::Campaigning`]) and grants a lower id's, then gives way to
//!   it even if its own pre-vote succeeds. Of two candidates that ask
//!   within a round trip of each other, one campaigns.
//! - **The successor first.** In a home region's group, a member outside
//!   the region where the group's tenants live and the one they would fail
//!   over to waits a heartbeat and the timeout's spread longer, so that the
//!   lead lands where the tenants go ([`crate::leadership::succession`]).
//! - **Clock.** A member barred by [`ClockGuard::may_campaign`] does not
//!   campaign at all.
//!
//! A leader that dies is replaced about `election_max` after it was last
//! heard (the lease every voter keeps anyway), plus one round trip for the
//! pre-vote. An operator's `elect` and the hand-off to the preferred member
//! ([`crate::housekeeping`]) start an election directly, as before.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use openraft::storage::RaftLogStorage;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use rand::Rng;
use tokio::time::Instant;

use crate::clock::ClockGuard;
use crate::leadership::pre_vote::{PreVote, PreVoteError, PreVoteRequest, Silence};
use crate::leadership::quorum;
use crate::leadership::succession::Succession;
use crate::log_store::LogStore;
use crate::network::Network;
use crate::tasks::{GroupTasks, Lifetime};
use crate::types::{NodeId, Raft};

/// What this member's election timer did, for `/metrics`. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ElectionMetrics {
    /// Pre-vote rounds a majority granted: each started an election.
    pub campaigns: Counter,
    /// Pre-vote rounds a majority refused: no election, no new term.
    pub refused: Counter,
    /// Pre-vote rounds a majority granted while this member granted a
    /// candidate of a lower id: it gave way, no election.
    pub yielded: Counter,
    /// Ticks of the timer that came more than a heartbeat late.
    pub stalls: Counter,
}

impl ElectionMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "raft_prevote_campaigns",
            "Pre-vote rounds a majority granted, each followed by an election",
            self.campaigns.clone(),
        );
        registry.register(
            "raft_prevote_refused",
            "Pre-vote rounds a majority refused: no election was started",
            self.refused.clone(),
        );
        registry.register(
            "raft_prevote_yielded",
            "Pre-vote rounds a majority granted while another candidate asked at once: this member gave way",
            self.yielded.clone(),
        );
        registry.register(
            "raft_election_timer_stalls",
            "Ticks of the election timer more than a heartbeat late: silence is counted again after each",
            self.stalls.clone(),
        );
    }
}

/// The election timer of one member; [`Elections::start`] runs it.
pub struct Elections {
    pub raft: Raft,
    pub log: LogStore,
    pub network: Network,
    pub clock: Arc<ClockGuard>,
    pub silence: Arc<Silence>,
    pub metrics: ElectionMetrics,
    pub heartbeat: Duration,
    pub election_min: Duration,
    pub election_max: Duration,
    /// A home region's group: who campaigns first (`None`: every member).
    pub succession: Option<Succession>,
}

impl std::fmt::Debug for Elections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elections")
            .field("election_max", &self.election_max)
            .finish_non_exhaustive()
    }
}

impl Elections {
    /// Runs the timer, owned by `tasks`, until the Raft core or the group
    /// stops.
    pub fn start(self, tasks: &GroupTasks) {
        tasks.spawn("election timer", Lifetime::Group, self.run());
    }

    /// Silence needed before the next campaign: the lease plus a random
    /// share of the election timeout's range, drawn anew for each attempt
    /// so two members rarely campaign together.
    fn next_wait(&self) -> Duration {
        let spread = self.election_max.saturating_sub(self.election_min);
        self.election_max + spread.mul_f64(rand::rng().random::<f64>())
    }

    /// How much longer than its drawn wait this member lets a silence
    /// last: a heartbeat and the timeout's spread unless the succession
    /// favours it, so a favoured member's pre-vote arrives first.
    fn deferral(&self) -> Duration {
        match &self.succession {
            Some(succession) if !succession.favours_this_member() => {
                self.heartbeat + self.election_max.saturating_sub(self.election_min)
            }
            _ => Duration::ZERO,
        }
    }

    async fn run(mut self) {
        let metrics = self.raft.metrics();
        let every =
            (self.heartbeat / 4).clamp(Duration::from_millis(10), Duration::from_millis(100));
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_tick = Instant::now();
        let mut wait = self.next_wait();
        let mut not_before = Instant::now();
        let id = metrics.borrow().id;
        loop {
            ticks.tick().await;
            let now = Instant::now();
            if now.duration_since(last_tick) > every + self.heartbeat {
                self.silence.resumed(now);
                self.metrics.stalls.inc();
            }
            last_tick = now;
            // The core owns the sending half: gone, the member is stopping.
            if metrics.has_changed().is_err() {
                return;
            }
            let configs: Vec<BTreeSet<NodeId>> = metrics
                .borrow()
                .membership_config
                .membership()
                .get_joint_config()
                .clone();
            if !configs.iter().any(|c| c.contains(&id)) || !self.clock.may_campaign() {
                continue;
            }
            let Some(quiet) = self.silence.read(&self.raft).await else {
                return;
            };
            if quiet.state == ServerState::Leader || quiet.silent_for < wait || now < not_before {
                continue;
            }
            // Read only once the silence is long enough to matter.
            if quiet.silent_for < wait + self.deferral() {
                continue;
            }
            // It told a candidate it would vote for it: that candidate's
            // election runs now, and a campaign of its own would split the
            // vote.
            let window_start = now.checked_sub(self.election_min).unwrap_or(now);
            if self.silence.granted_since(window_start).is_some() {
                continue;
            }
            wait = self.next_wait();
            // However the round ends, the next waits a while.
            not_before = Instant::now()
                + self
                    .election_max
                    .mul_f64(0.25 + rand::rng().random::<f64>() / 4.0);
            let silence = self.silence.clone();
            let asking = silence.asking();
            if self.pre_vote(id).await {
                // Meanwhile it granted another candidate's pre-vote (a
                // lower id's, or a longer log's): that one campaigns.
                if let Some(other) = self.silence.granted_since(asking.since()) {
                    self.metrics.yielded.inc();
                    tracing::info!(
                        candidate = other,
                        "a majority agrees, but member {other} asked at the same time: giving way"
                    );
                    continue;
                }
                self.metrics.campaigns.inc();
                tracing::info!(
                    silent_ms = quiet.silent_for.as_millis() as u64,
                    "no word from a leader and a majority agrees: campaigning"
                );
                if self.raft.trigger().elect().await.is_err() {
                    return;
                }
            } else {
                self.metrics.refused.inc();
            }
        }
    }

    /// Whether a majority of every voter configuration, this member
    /// included, would vote for it.
    async fn pre_vote(&mut self, id: NodeId) -> bool {
        let last_log_id = match self.log.get_log_state().await {
            Ok(state) => state.last_log_id,
            Err(e) => {
                tracing::error!(error = %e, "pre-vote: reading the log's last id");
                return false;
            }
        };
        let request = PreVoteRequest { last_log_id };
        let (configs, nodes) = quorum::voters_but(&self.raft.metrics().borrow(), id);
        let mut asks = tokio::task::JoinSet::new();
        for (peer, node) in nodes {
            let mut network = self.network.clone();
            let timeout = self.election_max;
            asks.spawn(async move {
                let answer = network.pre_vote(peer, &node, request, timeout).await;
                (peer, answer)
            });
        }
        let mut yes = BTreeSet::from([id]);
        // Decided at the majority's last answer: a dead or cut-off voter's
        // silence is not waited out (the set's drop aborts its question).
        while !quorum::majority_of_every(&configs, &yes)
            && let Some(Ok((peer, answer))) = asks.join_next().await
        {
            match answer {
                Ok(PreVote::Granted) | Err(PreVoteError::NotServed) => {
                    yes.insert(peer);
                }
                Ok(refused) => tracing::debug!(peer, ?refused, "pre-vote refused"),
                Err(PreVoteError::Failed(e)) => {
                    tracing::debug!(peer, error = %e, "pre-vote not answered");
                }
            }
        }
        quorum::majority_of_every(&configs, &yes)
    }
}
