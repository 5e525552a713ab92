//! The pre-vote RPC (`POST /raft/prevote`): what a candidate asks, what a
//! voter answers and how it counts its silence. The timer that asks is
//! [`crate::leadership::election`], whose docs give the rules.

use std::sync::Mutex;
use std::time::Duration;

use openraft::ServerState;
use openraft::storage::RaftLogStorage;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::clock::ClockGuard;
use crate::log_store::LogStore;
use crate::types::{LogId, NodeId, Raft};

pub use crate::link::PREVOTE_PATH;

/// What a candidate sends with its pre-vote: its last log id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteRequest {
    pub last_log_id: Option<LogId>,
}

/// A voter's answer to a pre-vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PreVote {
    /// It would vote for the candidate.
    Granted,
    /// It leads, with a clock a majority agrees with.
    Leads,
    /// It heard a leader within its lease.
    HearsLeader,
    /// Its log is ahead of the candidate's: it would refuse the vote.
    LogAhead,
    /// It is asking for pre-votes itself, with a log as long and a lower
    /// id: one of two candidates that ask at once campaigns
    /// ([`crate::leadership::election`]). Last, so the others keep their wire indexes;
    /// a candidate of the build before cannot read it and counts it as no
    /// answer, which is what it means.
    Campaigning,
}

/// When this member's silence started: the later of openraft's vote time
/// and the end of its last stall. Shared by the timer and the pre-vote
/// answer, so both count silence alike.
///
/// It also remembers the last pre-vote this member granted, and to whom:
/// a member that just told a candidate "I would vote for you" stands aside
/// while that candidate's election runs ([`crate::leadership::election`]).
#[derive(Debug)]
pub struct Silence {
    resumed_at: Mutex<Instant>,
    granted: Mutex<Option<(Instant, NodeId)>>,
    /// Since when this member's own pre-vote has been out, if it is.
    asking: Mutex<Option<Instant>>,
}

impl Default for Silence {
    fn default() -> Self {
        Self {
            resumed_at: Mutex::new(Instant::now()),
            granted: Mutex::new(None),
            asking: Mutex::new(None),
        }
    }
}

/// This member's own pre-vote, out from [`Silence::asking`] until dropped.
#[derive(Debug)]
pub(crate) struct Asking<'a> {
    silence: &'a Silence,
    since: Instant,
}

impl Asking<'_> {
    pub(crate) fn since(&self) -> Instant {
        self.since
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        *self
            .silence
            .asking
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
    }
}

impl Silence {
    /// Marks this member's own pre-vote out until the guard is dropped.
    pub(crate) fn asking(&self) -> Asking<'_> {
        let since = Instant::now();
        *self.asking.lock().unwrap_or_else(|p| p.into_inner()) = Some(since);
        Asking {
            silence: self,
            since,
        }
    }

    fn is_asking(&self) -> bool {
        self.asking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    fn granted_to(&self, candidate: NodeId) {
        *self.granted.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), candidate));
    }

    /// The candidate this member last granted a pre-vote to, if that was
    /// at or after `since`.
    pub(crate) fn granted_since(&self, since: Instant) -> Option<NodeId> {
        self.granted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .filter(|(at, _)| *at >= since)
            .map(|(_, candidate)| candidate)
    }

    pub(crate) fn resumed(&self, at: Instant) {
        *self.resumed_at.lock().unwrap_or_else(|p| p.into_inner()) = at;
    }

    fn since_resumed(&self) -> Duration {
        self.resumed_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// How long this member has heard no leader (see the module docs), and
    /// what it knows of its own state as of now.
    pub(crate) async fn read(&self, raft: &Raft) -> Option<Quiet> {
        let since_resumed = self.since_resumed();
        raft.with_raft_state(move |st| Quiet {
            state: st.server_state,
            committed_vote: st.vote_ref().is_committed(),
            silent_for: st
                .vote_last_modified()
                .map_or(since_resumed, |t| t.elapsed().min(since_resumed)),
        })
        .await
        .ok()
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Quiet {
    pub(crate) state: ServerState,
    pub(crate) committed_vote: bool,
    pub(crate) silent_for: Duration,
}

/// A pre-vote that got no answer.
#[derive(Debug, thiserror::Error)]
pub enum PreVoteError {
    /// The voter has no pre-vote (the build before): its real vote decides.
    #[error("the voter does not serve pre-votes")]
    NotServed,
    #[error(transparent)]
    Failed(#[from] Box<crate::types::RpcError>),
}

/// This member's answer to a candidate's pre-vote (module docs).
/// `candidate` is the asking member's id, as its link declares it
/// (`None` from a caller that does not): a granted pre-vote is remembered
/// against it, and while this member's own pre-vote is out, a candidate
/// with an equal log and a higher id is refused ([`PreVote::Campaigning`]).
pub async fn answer(
    raft: &Raft,
    log: &LogStore,
    clock: &ClockGuard,
    silence: &Silence,
    candidate: Option<NodeId>,
    request: PreVoteRequest,
) -> PreVote {
    let lease = Duration::from_millis(raft.config().election_timeout_max);
    let Some(quiet) = silence.read(raft).await else {
        return PreVote::HearsLeader;
    };
    if quiet.state == ServerState::Leader && clock.may_campaign() {
        return PreVote::Leads;
    }
    if quiet.state != ServerState::Leader && quiet.committed_vote && quiet.silent_for < lease {
        return PreVote::HearsLeader;
    }
    let mut log = log.clone();
    match log.get_log_state().await {
        Ok(state) if state.last_log_id > request.last_log_id => PreVote::LogAhead,
        Ok(state)
            if state.last_log_id == request.last_log_id
                && silence.is_asking()
                && candidate.is_some_and(|c| c > raft.metrics().borrow().id) =>
        {
            PreVote::Campaigning
        }
        Ok(_) => {
            if let Some(candidate) = candidate {
                silence.granted_to(candidate);
            }
            PreVote::Granted
        }
        Err(e) => {
            tracing::error!(error = %e, "pre-vote: reading the log's last id");
            PreVote::LogAhead
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_granted_pre_vote_is_remembered_from_when_it_was_granted() {
        let silence = Silence::default();
        let before = Instant::now();
        assert_eq!(silence.granted_since(before), None);
        silence.granted_to(2);
        assert_eq!(silence.granted_since(before), Some(2));
        let after = Instant::now() + Duration::from_millis(1);
        assert_eq!(silence.granted_since(after), None);
    }

    #[test]
    fn a_member_is_asking_while_its_guard_lives() {
        let silence = Silence::default();
        assert!(!silence.is_asking());
        {
            let asking = silence.asking();
            assert!(silence.is_asking());
            assert!(asking.since() <= Instant::now());
        }
        assert!(!silence.is_asking());
    }
}
