//! An append that outlives openraft's wait for it (RELIABILITY.md,
//! finding 4).
//!
//! openraft 0.9 gives every append-entries RPC its heartbeat interval as
//! timeout and drops the call when it passes. Dropping an HTTP request
//! mid-way closes its connection: the follower's handler is cancelled,
//! perhaps before raft saw the append (so the follower does not even
//! count the leader as heard), the next attempt dials and shakes hands
//! again, and sends the same entries again. On a machine starved of CPU,
//! where answers routinely come later than a heartbeat, that loop made no
//! progress at all: the leader could not bring a follower with a stale
//! tail up to date, the follower stopped hearing it and campaigned.
//!
//! So a connection sends an append it cannot answer otherwise as a task of
//! its own, bounded by the *append budget* (the member's `election_max`,
//! the lease after which a follower that has not heard its leader may
//! campaign anyway), not by openraft's wait. openraft is told `Timeout`
//! when its wait ends first; its next append on the connection waits for
//! the one in flight (one append on the wire per follower, as openraft
//! means) and, when that one's answer answers it too, gets it without
//! sending anything: see [`AppendInFlight::answer_for`].

use tokio::task::JoinHandle;

use crate::types::{AppendEntriesRequest, AppendEntriesResponse, LogId, RpcError, Vote};

/// What an append was answered with.
pub(crate) type AppendAnswer = Result<AppendEntriesResponse, RpcError>;

/// One append sent alone, running to its answer whether or not openraft
/// still waits for it.
#[derive(Debug)]
pub(crate) struct AppendInFlight {
    pub(crate) vote: Vote,
    pub(crate) prev: Option<LogId>,
    /// Its last entry, or `prev` when it carried none.
    pub(crate) up_to: Option<LogId>,
    pub(crate) answer: JoinHandle<AppendAnswer>,
}

/// The last log id `rpc` carries, or its `prev_log_id` when it carries none.
pub(crate) fn up_to(rpc: &AppendEntriesRequest) -> Option<LogId> {
    rpc.entries.last().map(|e| e.log_id).or(rpc.prev_log_id)
}

impl AppendInFlight {
    /// The answer `rpc` would get, known from this append's `answer`
    /// without sending `rpc`; `None` when it is not known.
    ///
    /// Only an append with entries, of the same vote, from the same position
    /// and reaching at least as far is answered, and each answer is a fact about the
    /// follower under this vote, where a leader never rewrites its own
    /// entries: `Success` is `Success` when `rpc` ends where this append
    /// ended, and `PartialSuccess` up to this append's end when `rpc` goes
    /// further (openraft then sends the rest); `Conflict` means the
    /// follower does not hold the position both start from; a higher vote
    /// is the follower's whatever it is asked. A transport error answers
    /// nothing: `rpc` goes over the wire.
    pub(crate) fn answer_for(
        &self,
        rpc: &AppendEntriesRequest,
        answer: &AppendAnswer,
    ) -> Option<AppendAnswer> {
        // An append without entries carries news (the commit index) and is
        // answered by the connection's commit notices; so is the rest.
        if rpc.entries.is_empty() || self.vote != rpc.vote || self.prev != rpc.prev_log_id {
            return None;
        }
        let wanted = up_to(rpc);
        let index = |id: &Option<LogId>| id.map(|l| l.index);
        if index(&wanted) < index(&self.up_to) {
            return None;
        }
        match answer {
            Ok(AppendEntriesResponse::Success) if wanted == self.up_to => {
                Some(Ok(AppendEntriesResponse::Success))
            }
            // Nothing held past the position both start from: no news.
            Ok(AppendEntriesResponse::Success) if self.up_to == self.prev => None,
            Ok(AppendEntriesResponse::Success) => {
                Some(Ok(AppendEntriesResponse::PartialSuccess(self.up_to)))
            }
            Ok(AppendEntriesResponse::PartialSuccess(held)) if *held != self.prev => {
                Some(Ok(AppendEntriesResponse::PartialSuccess(*held)))
            }
            Ok(AppendEntriesResponse::Conflict) => Some(Ok(AppendEntriesResponse::Conflict)),
            Ok(AppendEntriesResponse::HigherVote(vote)) => {
                Some(Ok(AppendEntriesResponse::HigherVote(*vote)))
            }
            Ok(AppendEntriesResponse::PartialSuccess(_)) | Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload};

    use crate::types::Entry;

    fn id(index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(3, 1), index)
    }

    fn append(prev: u64, last: u64) -> AppendEntriesRequest {
        AppendEntriesRequest {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(id(prev)),
            leader_commit: None,
            entries: (prev + 1..=last)
                .map(|i| Entry {
                    log_id: id(i),
                    payload: EntryPayload::Blank,
                })
                .collect(),
        }
    }

    fn in_flight(rpc: &AppendEntriesRequest) -> AppendInFlight {
        AppendInFlight {
            vote: rpc.vote,
            prev: rpc.prev_log_id,
            up_to: up_to(rpc),
            answer: tokio::spawn(async { Ok(AppendEntriesResponse::Success) }),
        }
    }

    fn known(sent: (u64, u64), asked: (u64, u64), answer: AppendAnswer) -> Option<AppendAnswer> {
        in_flight(&append(sent.0, sent.1)).answer_for(&append(asked.0, asked.1), &answer)
    }

    #[tokio::test]
    async fn the_same_append_gets_the_same_answer() {
        let ok = || Ok(AppendEntriesResponse::Success);
        assert!(matches!(
            known((4, 9), (4, 9), ok()),
            Some(Ok(AppendEntriesResponse::Success))
        ));
        assert!(matches!(
            known((4, 9), (4, 9), Ok(AppendEntriesResponse::Conflict)),
            Some(Ok(AppendEntriesResponse::Conflict))
        ));
        let higher = Vote::new_committed(4, 2);
        assert!(matches!(
            known((4, 9), (4, 12), Ok(AppendEntriesResponse::HigherVote(higher))),
            Some(Ok(AppendEntriesResponse::HigherVote(v))) if v == higher
        ));
    }

    #[tokio::test]
    async fn a_longer_append_is_told_how_far_the_follower_holds() {
        assert!(matches!(
            known((4, 9), (4, 12), Ok(AppendEntriesResponse::Success)),
            Some(Ok(AppendEntriesResponse::PartialSuccess(Some(held)))) if held == id(9)
        ));
    }

    #[tokio::test]
    async fn another_position_a_shorter_append_or_a_transport_error_is_sent() {
        let ok = || Ok(AppendEntriesResponse::Success);
        assert!(known((4, 9), (5, 9), ok()).is_none(), "another position");
        assert!(known((4, 9), (4, 6), ok()).is_none(), "a shorter append");
        assert!(known((4, 9), (4, 4), ok()).is_none(), "a commit notice");
        assert!(
            known((4, 4), (4, 9), ok()).is_none(),
            "a heartbeat says nothing new"
        );
        let mut other_vote = append(4, 9);
        other_vote.vote = Vote::new_committed(4, 1);
        assert!(
            in_flight(&append(4, 9))
                .answer_for(&other_vote, &ok())
                .is_none(),
            "another vote"
        );
        let lost = Err(RpcError::Network(openraft::error::NetworkError::new(
            &std::io::Error::other("reset"),
        )));
        assert!(known((4, 9), (4, 9), lost).is_none(), "a transport error");
    }
}
