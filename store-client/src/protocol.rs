//! The client API's messages, shared by the member (`once_raft_store`'s
//! `api_service`) and the client library ([`crate::client`]). Bodies are
//! postcard; status is JSON for humans.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::NodeId;
use crate::command::{self, ClientRequest, Millis, Placement, Record, RegionStatus, Reply, Scope};

/// The path prefix a member serves group `name`'s Raft RPC, client API and
/// admin endpoints under (docs/decisions/0063-a-raft-group-per-home-region.md);
/// the directory is at the root.
pub fn group_path(name: &str) -> String {
    format!("/groups/{name}")
}

pub const WRITE_PATH: &str = "/api/write";
pub const READ_PATH: &str = "/api/read";
pub const STATUS_PATH: &str = "/api/status";
pub const RECORDS_PATH: &str = "/admin/records";
pub const ADD_LEARNER_PATH: &str = "/admin/add-learner";
pub const CHANGE_MEMBERSHIP_PATH: &str = "/admin/change-membership";
pub const SNAPSHOT_PATH: &str = "/admin/snapshot";
pub const ELECT_PATH: &str = "/admin/elect";
/// Test builds of raft-store only (`failpoints`): moves the member's clock
/// forward, so scenario tests run a lease or a window out without waiting.
pub const CLOCK_ADVANCE_PATH: &str = "/admin/clock/advance";

/// How the answer to a write or read came back from one member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer<T> {
    Done(T),
    /// This member is not the leader; `leader` is its best guess. Nothing
    /// was proposed by this member for this request *as far as it knows* —
    /// a leader that stepped down mid-write answers this too, which is why
    /// a client retries with the same `(client, seq)`.
    ForwardToLeader {
        leader: Option<NodeId>,
    },
    /// The member could not serve; the request may or may not have applied.
    Unavailable(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Consistency {
    /// Read-index on the leader: sees every write acknowledged before.
    Linearizable,
    /// Any member may answer if its copy is final (`COMPLETED` or
    /// `FAILED_REPLAYABLE`); otherwise it answers `NotFinalHere`.
    FinalFromAnyMember,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Read {
    Record {
        scope: Scope,
        consistency: Consistency,
    },
    Placement {
        tenant: String,
    },
    /// Every region's status (linearizable).
    Regions,
    /// Every tenant's placement (linearizable): what a router caches.
    Placements,
    /// Records matching a query (linearizable), for recovery and operators.
    Records(RecordQuery),
    /// How many records match a query, its limit aside (linearizable):
    /// gauges, without shipping the records.
    CountRecords(RecordQuery),
    /// The record that created a payment, if it belongs to `tenant`
    /// (linearizable): a region answering for a payment whose row another
    /// region holds. Another tenant's payment is simply not found.
    RecordOfPayment {
        tenant: String,
        payment_id: String,
    },
    /// One tenant's payments in creation order (linearizable): the records
    /// that created them, from the per-tenant payment index
    /// (`Records` answer). What `GET /payments` lists in every region.
    TenantPayments(PaymentListQuery),
    /// Wire version 5. The group `tenant` lives in, as this member's copy
    /// of the directory says (`None`: this group's own). Any member
    /// answers: an assignment never changes, and a claim sent here on a
    /// `None` read before the assignment applied is refused
    /// (`Reply::OtherGroup`), so a stale answer costs a round trip, never
    /// a misplaced record.
    Assignment {
        tenant: String,
    },
}

/// Which of a tenant's payments a [`Read::TenantPayments`] wants, in
/// `(record created_at, payment id)` order. Filters combine with AND and
/// match the record's business key exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentListQuery {
    pub tenant: String,
    pub account_id: Option<String>,
    pub merchant_reference: Option<String>,
    /// Only payments strictly after this `(created_at, payment id)`.
    pub after: Option<(Millis, String)>,
    /// At most this many records.
    pub limit: u32,
}

impl PaymentListQuery {
    /// Whether `r` (a record of [`Self::tenant`] that created a payment)
    /// passes the account and merchant reference filters.
    pub fn matches(&self, r: &Record) -> bool {
        let key = r.business_key.as_ref();
        self.account_id
            .as_ref()
            .is_none_or(|a| key.is_some_and(|k| &k.account_id == a))
            && self
                .merchant_reference
                .as_ref()
                .is_none_or(|m| key.is_some_and(|k| &k.merchant_reference == m))
    }
}

/// Which records a [`Read::Records`] wants. Filters combine with AND.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordQuery {
    /// Only unfinished records (`IN_PROGRESS`, `UNKNOWN_REQUIRES_RECOVERY`):
    /// served from an index, without walking finished records.
    pub unfinished: bool,
    /// Only unfinished records whose lease (or recovery backoff) ended at or
    /// before this time. Implies `unfinished`.
    pub due_at: Option<Millis>,
    pub status: Option<command::Status>,
    pub tenant: Option<String>,
    pub key: Option<String>,
    /// Only records of tenants whose current placement names this region
    /// home, or that have no placement: what a region's recovery worker
    /// may finish. Judged by the member answering, against the placements
    /// it holds, so the limit counts only such records.
    pub homed_in: Option<String>,
    /// Only records holding a blob (payload or answer) sealed under a key
    /// other than this one: what re-encryption rewrites, and what keeps an
    /// old key from being retired. Read from the blobs' headers, no key
    /// needed.
    pub sealed_not_under: Option<String>,
    /// At most this many, oldest (`created_at`) first.
    pub limit: u32,
}

impl RecordQuery {
    /// Whether `r` matches every condition but `homed_in`, which needs the
    /// placements ([`Self::homed_in_matches`]).
    pub fn matches(&self, r: &Record) -> bool {
        (!self.unfinished || r.status.is_unfinished())
            && self
                .due_at
                .is_none_or(|t| r.status.is_unfinished() && r.lease_expired(t))
            && self.status.is_none_or(|s| r.status == s)
            && self.tenant.as_ref().is_none_or(|t| &r.scope.tenant == t)
            && self.key.as_ref().is_none_or(|k| &r.scope.key == k)
            && self.sealed_not_under.as_ref().is_none_or(|id| {
                [&r.payload, &r.response]
                    .into_iter()
                    .flatten()
                    .any(|blob| blob.key_id() != Some(id.as_str()))
            })
    }

    /// Whether a record of a tenant placed at `placement` passes `homed_in`.
    pub fn homed_in_matches(&self, placement: Option<&command::Placement>) -> bool {
        match (&self.homed_in, placement) {
            (None, _) | (Some(_), None) => true,
            (Some(region), Some(p)) => &p.home == region,
        }
    }

    /// Whether the unfinished index holds every possible match.
    pub fn within_unfinished(&self) -> bool {
        self.unfinished
            || self.due_at.is_some()
            || self.status.is_some_and(command::Status::is_unfinished)
    }
}

// A message built once per request and serialized at once: boxing the
// record would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadReply {
    Record(Option<Record>),
    Placement(Option<Placement>),
    Regions(Vec<(String, RegionStatus)>),
    Placements(Vec<(String, Placement)>),
    Records(Vec<Record>),
    Count(u64),
    NotFinalHere,
    /// [`Read::Assignment`]'s answer.
    Assignment(Option<String>),
}

pub type WriteAnswer = Answer<Reply>;
pub type ReadAnswer = Answer<ReadReply>;

/// One write as sent to a member.
pub type WriteRequest = ClientRequest;

/// `GET /api/status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Status {
    pub id: NodeId,
    pub raft_addr: String,
    pub api_addr: String,
    pub state: String,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub last_log_index: Option<u64>,
    /// On the leader: matched by a quorum of voters. Elsewhere: applied.
    pub committed_index: Option<u64>,
    pub applied_index: Option<u64>,
    pub snapshot_index: Option<u64>,
    pub purged_index: Option<u64>,
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    /// On the leader: each follower's lag in entries behind the leader's
    /// last log index (`null`: nothing matched yet).
    pub follower_lag: BTreeMap<NodeId, Option<u64>>,
    /// Wire versions: this member's, its peers', the cluster's. Absent
    /// from members of the build before versions.
    #[serde(default)]
    pub wire: WireStatus,
    /// Clients whose dedup entries this member's state remembers
    /// (`null` from a build before versions).
    #[serde(default)]
    pub remembered_clients: Option<u64>,
    /// Milliseconds since this member last had word that its leader holds
    /// a quorum: the leader, since a majority of the voters answered it; a
    /// follower, since its last RPC from or to the leader. `null`: no leader, or
    /// not heard yet (and from a build before the field).
    #[serde(default)]
    pub leader_heard_ms_ago: Option<u64>,
    /// This member's leader lease (its `election-timeout-max`): a leader
    /// not heard from for longer is as good as gone here. `null` from a
    /// build before the field.
    #[serde(default)]
    pub leader_lease_ms: Option<u64>,
    /// This member's region label (`null` from a build before the field).
    #[serde(default)]
    pub region: Option<String>,
    /// The region of every member of this group's membership, as this
    /// member knows them (its `--peer-regions`; itself included).
    #[serde(default)]
    pub member_regions: BTreeMap<NodeId, String>,
    /// Milliseconds since this member last exchanged a Raft RPC with each
    /// peer, in any group it hosts: the store's own word on which members
    /// are alive and in touch. A peer never heard is absent. What a router
    /// corroborates a region's failed health checks with
    /// (docs/decisions/0085-a-region-is-down-on-evidence-that-survives-load.md).
    #[serde(default)]
    pub peers_heard_ms_ago: BTreeMap<NodeId, u64>,
    /// The regions the cluster declared, as this member has applied them:
    /// the only ones a placement, status, move or evacuation may name
    /// (empty: none declared, nothing checked; docs/decisions/0098).
    #[serde(default)]
    pub known_regions: Vec<String>,
}

impl Status {
    /// Milliseconds since this member's leader was last heard, `elapsed`
    /// after the member answered (saturating). `None` without a leader or
    /// before it was heard.
    pub fn leader_heard_ms(&self, elapsed: Duration) -> Option<u64> {
        self.leader?;
        let elapsed = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        Some(self.leader_heard_ms_ago?.saturating_add(elapsed))
    }

    /// Whether the store can take writes as this member saw it, `elapsed`
    /// after it answered: it had heard from a leader holding a quorum, and
    /// that word plus `elapsed` is still within its lease. `Err` says why
    /// not; `None` when the member predates the fields.
    pub fn leader_in_reach(&self, elapsed: Duration) -> Option<Result<(), String>> {
        self.leader_in_reach_within(elapsed, 1)
    }

    /// [`Self::leader_in_reach`], with `leases` of the member's leases
    /// allowed since the leader was heard rather than one: how a node
    /// judges readiness, which a lease missed on a loaded machine should
    /// not take away (decision 0066).
    pub fn leader_in_reach_within(
        &self,
        elapsed: Duration,
        leases: u64,
    ) -> Option<Result<(), String>> {
        let lease = self.leader_lease_ms?;
        let allowed = lease.saturating_mul(leases.max(1));
        Some(match (self.leader, self.leader_heard_ms(elapsed)) {
            (Some(_), Some(ago)) if ago <= allowed => Ok(()),
            (Some(leader), Some(ago)) if leases <= 1 => Err(format!(
                "member {} last heard from leader {leader} {ago} ms ago, past its {lease} ms lease",
                self.id
            )),
            (Some(leader), Some(ago)) => Err(format!(
                "member {} last heard from leader {leader} {ago} ms ago, past {leases} of its {lease} ms leases",
                self.id
            )),
            (Some(leader), None) => Err(format!(
                "member {} has not heard from leader {leader} yet",
                self.id
            )),
            (None, _) => Err(format!("member {} knows no leader", self.id)),
        })
    }
}

/// What a member knows of wire versions (docs/decisions/0041-wire-versions.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireStatus {
    /// The newest version this member speaks (its `--wire-version`).
    pub speaks: u16,
    /// The version the cluster has moved to, as this member has applied it:
    /// commands up to it may be proposed.
    pub cluster: u16,
    /// The version each member last declared to this one on a Raft RPC
    /// (this member included); members not heard from are absent.
    pub members: BTreeMap<NodeId, u16>,
    /// The newest version every current member declares (`null`: some
    /// member not heard from yet): what a leader moves the cluster to.
    pub agreed: Option<u16>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddLearner {
    pub id: NodeId,
    pub raft_addr: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChangeMembership {
    pub voters: Vec<NodeId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(leader: Option<NodeId>, heard: Option<u64>, lease: Option<u64>) -> Status {
        Status {
            id: 2,
            leader,
            leader_heard_ms_ago: heard,
            leader_lease_ms: lease,
            ..Status::default()
        }
    }

    #[test]
    fn a_leader_is_in_reach_while_heard_within_the_lease() {
        let now = Duration::ZERO;
        assert_eq!(
            status(Some(1), Some(120), Some(1000)).leader_in_reach(now),
            Some(Ok(()))
        );
        assert_eq!(
            status(Some(1), Some(1000), Some(1000)).leader_in_reach(now),
            Some(Ok(()))
        );
        for (leader, heard) in [(Some(1), Some(1001)), (Some(1), None), (None, Some(5))] {
            assert!(
                matches!(
                    status(leader, heard, Some(1000)).leader_in_reach(now),
                    Some(Err(_))
                ),
                "{leader:?} heard {heard:?} ms ago"
            );
        }
        assert_eq!(
            status(Some(1), Some(5), None).leader_in_reach(now),
            None,
            "a member before the fields: ask the leader"
        );
    }

    #[test]
    fn a_word_ages_with_the_time_since_the_member_answered() {
        let heard = status(Some(1), Some(400), Some(1000));
        assert_eq!(
            heard.leader_in_reach(Duration::from_millis(600)),
            Some(Ok(()))
        );
        let stale = heard.leader_in_reach(Duration::from_millis(601));
        assert!(
            matches!(&stale, Some(Err(why)) if why.contains("1001 ms ago")),
            "{stale:?}"
        );
        assert!(
            heard.leader_in_reach(Duration::MAX).unwrap().is_err(),
            "saturates rather than wraps"
        );
    }

    #[test]
    fn a_node_allows_two_leases_where_one_was_missed() {
        let heard = status(Some(1), Some(1500), Some(1000));
        assert!(heard.leader_in_reach(Duration::ZERO).unwrap().is_err());
        assert_eq!(
            heard.leader_in_reach_within(Duration::from_millis(500), 2),
            Some(Ok(()))
        );
        let stale = heard.leader_in_reach_within(Duration::from_millis(501), 2);
        assert!(
            matches!(&stale, Some(Err(why)) if why.contains("past 2 of its 1000 ms leases")),
            "{stale:?}"
        );
        assert!(
            status(None, Some(5), Some(1000))
                .leader_in_reach_within(Duration::ZERO, 2)
                .unwrap()
                .is_err(),
            "no leader is no leader however many leases"
        );
    }
}
