//! raft-store's own view of which regions' members are alive, beside the
//! router's health checks.
//!
//! A health check that times out says only that the node did not answer
//! this router in time — on a loaded machine, as often a busy node or a
//! starved router as a dead one (RELIABILITY.md, finding 20). The members
//! exchange Raft RPCs every heartbeat and each says, in `/api/status`, how
//! long ago it last heard each peer (`peers_heard_ms_ago`) and its lease
//! (`leader_lease_ms`: what it waits before taking a silent leader for
//! gone). A region whose member no other member has heard for a lease is
//! gone from the store's side too; one whose member they hear is not, and
//! its node's silence is no proof of a lost region
//! (docs/decisions/0085-a-region-is-down-on-evidence-that-survives-load.md).
//!
//! [`watch_members`] asks every member for its status every
//! [`ASK_EVERY`] on the control runtime; [`StoreView::lost`] judges only
//! words asked after a given instant (the start of a region's failing
//! streak), so an old word, or a router too starved to ask, never counts
//! as evidence either way.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::join_all;
use once_store_client::NodeId;
use once_store_client::client::StoreClient;
use once_store_client::protocol::Status;
use tokio::time::MissedTickBehavior;

/// How often every member is asked: a fraction of any lease, so a
/// member's silence shows within a lease and a question.
pub const ASK_EVERY: Duration = Duration::from_millis(100);

/// The longest one question may take; a later answer is not waited for.
const ASK_LIMIT: Duration = Duration::from_secs(1);

/// One member's latest answer and when it was asked.
#[derive(Debug, Clone)]
struct Word {
    asked_at: Instant,
    status: Status,
}

/// What the members last said, by the member that said it.
#[derive(Debug, Default)]
pub struct StoreView {
    state: Mutex<ViewState>,
}

#[derive(Debug, Default)]
struct ViewState {
    words: BTreeMap<NodeId, Word>,
    /// Each region's member, as any member named it: kept when the member
    /// itself goes silent.
    member_of: BTreeMap<String, NodeId>,
}

impl StoreView {
    fn lock(&self) -> std::sync::MutexGuard<'_, ViewState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in a member's answer to a question asked at `asked_at`.
    pub fn heard(&self, asked_at: Instant, status: Status) {
        let mut state = self.lock();
        for (id, region) in &status.member_regions {
            state.member_of.insert(region.clone(), *id);
        }
        if let Some(region) = &status.region {
            state.member_of.insert(region.clone(), status.id);
        }
        let fresher = state
            .words
            .get(&status.id)
            .is_none_or(|w| w.asked_at <= asked_at);
        if fresher {
            state.words.insert(status.id, Word { asked_at, status });
        }
    }

    /// Whether the store says `region`'s member is gone, by words asked
    /// at or after `since`: at least one other member answered, and none
    /// of those that did has heard it within its lease. `false` when
    /// that cannot be told — no such word, the region's member unknown,
    /// members that predate the fields — so a missing view delays a
    /// verdict but never makes one.
    pub fn lost(&self, region: &str, since: Instant) -> bool {
        let state = self.lock();
        let Some(&member) = state.member_of.get(region) else {
            return false;
        };
        let mut others = state
            .words
            .values()
            .filter(|w| w.status.id != member && w.asked_at >= since)
            .peekable();
        if others.peek().is_none() {
            return false;
        }
        others.all(|w| {
            let Some(lease) = w.status.leader_lease_ms else {
                return false;
            };
            w.status
                .peers_heard_ms_ago
                .get(&member)
                .is_none_or(|ago| *ago > lease)
        })
    }
}

/// Asks every member of `client` for its status every [`ASK_EVERY`] until
/// the task is aborted, and tells `view` each answer.
pub async fn watch_members(client: std::sync::Arc<StoreClient>, view: std::sync::Arc<StoreView>) {
    let mut tick = tokio::time::interval(ASK_EVERY);
    // A slow round delays the next rather than bunching them up.
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let asked_at = Instant::now();
        let questions = (0..client.endpoints_len()).map(|i| {
            let client = &client;
            async move { tokio::time::timeout(ASK_LIMIT, client.status_of(i)).await }
        });
        for answer in join_all(questions).await {
            if let Ok(Ok(status)) = answer {
                view.heard(asked_at, status);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(id: NodeId, region: &str, heard: &[(NodeId, u64)]) -> Status {
        Status {
            id,
            region: Some(region.to_owned()),
            member_regions: BTreeMap::from([
                (1, "eu".to_owned()),
                (2, "us".to_owned()),
                (3, "ap".to_owned()),
            ]),
            leader_lease_ms: Some(400),
            peers_heard_ms_ago: heard.iter().copied().collect(),
            ..Status::default()
        }
    }

    #[test]
    fn a_region_is_lost_only_when_every_other_member_asked_since_has_not_heard_its_member() {
        let view = StoreView::default();
        let before = Instant::now();
        assert!(!view.lost("us", before), "no word: no verdict");

        view.heard(Instant::now(), status(1, "eu", &[(2, 900), (3, 20)]));
        assert!(view.lost("us", before), "member 2 unheard past the lease");
        // Another member still hears it: the store says it is alive.
        view.heard(Instant::now(), status(3, "ap", &[(2, 30), (1, 20)]));
        assert!(!view.lost("us", before));
        assert!(!view.lost("eu", before), "member 1 heard by 3");

        // Words asked before the instant judged from say nothing.
        let later = Instant::now() + Duration::from_secs(1);
        assert!(!view.lost("us", later));
        assert!(!view.lost("mars", before), "a region without a member");
    }

    #[test]
    fn the_members_own_word_and_a_member_never_heard_count_as_they_should() {
        let view = StoreView::default();
        let before = Instant::now();
        // Member 2 answers for itself: that is not the store's side.
        view.heard(Instant::now(), status(2, "us", &[(1, 10), (3, 10)]));
        assert!(!view.lost("us", before), "no other member has spoken");
        // Member 1 has never heard member 2 at all.
        view.heard(Instant::now(), status(1, "eu", &[(3, 10)]));
        assert!(view.lost("us", before));
        // A member of a build before the fields says nothing.
        view.heard(
            Instant::now(),
            Status {
                leader_lease_ms: None,
                ..status(3, "ap", &[])
            },
        );
        assert!(!view.lost("us", before));
    }
}
