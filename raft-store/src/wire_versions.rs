//! Which wire version each member speaks, as this member has heard it: its
//! own from its configuration, every peer's from the header on each Raft
//! RPC it sends or answers (docs/decisions/0041-wire-versions.md).
//!
//! A leader moves the cluster to the newest version every current member
//! speaks ([`WireVersions::agreed`]; [`crate::housekeeping`]); until every
//! member has been heard from, it moves nothing. A member that has not
//! spoken since its restart is judged by what it said before: the version
//! it declares on its next answer replaces it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

use crate::clock::MEMBER_HEADER;
use crate::types::NodeId;
use crate::wan;
use crate::wire::{VERSION_HEADER, WIRE_VERSION, version_in};

#[derive(Debug)]
pub struct WireVersions {
    id: NodeId,
    speaks: u16,
    heard: Mutex<BTreeMap<NodeId, u16>>,
}

impl WireVersions {
    /// `speaks`: the newest version this member declares, at most this
    /// build's [`WIRE_VERSION`] (lower pins the cluster there, so the
    /// build before can still be rolled back to).
    pub fn new(id: NodeId, speaks: u16) -> Self {
        let speaks = speaks.clamp(1, WIRE_VERSION);
        Self {
            id,
            speaks,
            heard: Mutex::new(BTreeMap::from([(id, speaks)])),
        }
    }

    pub fn speaks(&self) -> u16 {
        self.speaks
    }

    /// Member `member` declared `version`.
    pub fn heard(&self, member: NodeId, version: u16) {
        if member == self.id {
            return;
        }
        let previous = self
            .heard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(member, version);
        if previous != Some(version) {
            tracing::info!(
                member,
                version,
                ?previous,
                "a member declares its wire version"
            );
        }
    }

    /// Member `member` answered with `headers`.
    pub fn heard_in(&self, member: NodeId, headers: &HeaderMap) {
        self.heard(member, version_in(headers));
    }

    /// What `member` last declared; `None` before it was heard from.
    pub fn of(&self, member: NodeId) -> Option<u16> {
        self.heard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&member)
            .copied()
    }

    /// What each member last declared, this one included.
    pub fn members(&self) -> BTreeMap<NodeId, u16> {
        self.heard.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The newest version every one of `members` speaks; `None` while any
    /// of them has not been heard from.
    pub fn agreed(&self, members: impl IntoIterator<Item = NodeId>) -> Option<u16> {
        let heard = self.heard.lock().unwrap_or_else(|p| p.into_inner());
        members
            .into_iter()
            .map(|m| heard.get(&m).copied())
            .try_fold(u16::MAX, |lowest, v| v.map(|v| lowest.min(v)))
    }

    /// Stamps this member's version on an answer.
    fn declare(&self, response: &mut Response) {
        response
            .headers_mut()
            .insert(VERSION_HEADER, HeaderValue::from(self.speaks));
    }
}

/// Every answer of a listener declares this member's version, refusals
/// included: an answer without one comes from the build before versions.
pub async fn declare(
    State(versions): State<Arc<WireVersions>>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    versions.declare(&mut response);
    response
}

/// On the Raft listener, behind the check that the caller is a member:
/// records the version the sending member declares.
pub async fn hear(
    State(versions): State<Arc<WireVersions>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    if let Some(sender) = wan::header(headers, MEMBER_HEADER).and_then(|v| v.parse().ok()) {
        versions.heard_in(sender, headers);
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_agrees_on_the_oldest_member_once_every_member_is_heard() {
        let v = WireVersions::new(1, WIRE_VERSION);
        assert_eq!(v.agreed([1]), Some(WIRE_VERSION));
        assert_eq!(v.agreed([1, 2, 3]), None, "2 and 3 not heard yet");
        v.heard(2, WIRE_VERSION);
        v.heard_in(3, &HeaderMap::new());
        assert_eq!(v.agreed([1, 2, 3]), Some(1), "no header: the build before");
        v.heard(3, WIRE_VERSION);
        assert_eq!(v.agreed([1, 2, 3]), Some(WIRE_VERSION));
        // A member no longer in the membership does not count.
        v.heard(4, 1);
        assert_eq!(v.agreed([1, 2, 3]), Some(WIRE_VERSION));
        // A member heard from itself keeps its own version.
        v.heard(1, 1);
        assert_eq!(v.members()[&1], WIRE_VERSION);
    }

    #[test]
    fn a_pinned_member_agrees_to_no_more_than_its_pin() {
        let v = WireVersions::new(1, 1);
        v.heard(2, WIRE_VERSION);
        assert_eq!(v.agreed([1, 2]), Some(1));
        assert_eq!(WireVersions::new(1, 99).speaks(), WIRE_VERSION);
    }
}
