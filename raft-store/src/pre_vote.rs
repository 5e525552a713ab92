//! The pre-vote RPC (`POST /raft/prevote`): what a candidate asks, what a
//! voter answers and how it counts its silence. The timer that asks is
//! [`crate::election`], whose docs give the rules.

use std::sync::Mutex;
use std::time::Duration;

use openraft::ServerState;
use openraft::storage::RaftLogStorage;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::clock::ClockGuard;
use crate::log_store::LogStore;
use crate::types::{LogId, Raft};

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
}

/// When this member's silence started: the later of openraft's vote time
/// and the end of its last stall. Shared by the timer and the pre-vote
/// answer, so both count silence alike.
#[derive(Debug)]
pub struct Silence {
    resumed_at: Mutex<Instant>,
}

impl Default for Silence {
    fn default() -> Self {
        Self {
            resumed_at: Mutex::new(Instant::now()),
        }
    }
}

impl Silence {
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
pub async fn answer(
    raft: &Raft,
    log: &LogStore,
    clock: &ClockGuard,
    silence: &Silence,
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
        Ok(_) => PreVote::Granted,
        Err(e) => {
            tracing::error!(error = %e, "pre-vote: reading the log's last id");
            PreVote::LogAhead
        }
    }
}
