//! Who may call what on a member, by the identity of the caller's client
//! certificate (DESIGN §10, decision 0032). The edge's TLS listener puts the
//! verified [`Identity`] on each request; this module decides.
//!
//! | listener | what | who |
//! |---|---|---|
//! | Raft RPC | `/raft/*` (append, vote, snapshot, initialized) | store members |
//! | client API | `/api/status`, `/healthz`, `/readyz` | any identity of the CA |
//! | client API | record commands (claim … purge), record and payment reads, placement of one tenant, regions | nodes, operators |
//! | client API | set placement, bulk failover and failback, region status, every placement, regions | routers, operators |
//! | admin | health, readiness | anyone who completes the TLS handshake (probes present no certificate) |
//! | admin | status, `/metrics` | any identity of the CA |
//! | admin | membership, elections, snapshots, record dumps, partitions | operators (and the admin token) |
//!
//! A refusal is `403` with the store's JSON error shape, `{"errorCode":
//! "FORBIDDEN", "message": ...}`, before the body is read (path-level
//! checks) or right after it is decoded (per command and per read).
//!
//! A member started with `--insecure-plaintext` ([`Access::Open`]) has no
//! identities to check and lets every caller through; it says so loudly at
//! start.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use once_tls::{Identity, Role};

use crate::command::Op;
use crate::protocol::Read;

/// Whether callers are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Mutual TLS: every caller holds an identity, checked per call.
    Verified,
    /// Development only: plaintext, nobody is checked.
    Open,
}

/// The caller of one request, as the authorisation layer saw it.
#[derive(Debug, Clone)]
pub enum Caller {
    /// `--insecure-plaintext`: allowed everything.
    Unchecked,
    Verified(Identity),
    /// A TLS client whose certificate names no identity: allowed nothing.
    Anonymous,
}

impl Caller {
    fn of(access: Access, request: &Request) -> Self {
        match (access, request.extensions().get::<Identity>()) {
            (Access::Open, _) => Self::Unchecked,
            (Access::Verified, Some(identity)) => Self::Verified(identity.clone()),
            (Access::Verified, None) => Self::Anonymous,
        }
    }

    /// Whether the caller holds one of `roles`.
    pub fn is(&self, roles: &[Role]) -> bool {
        match self {
            Self::Unchecked => true,
            Self::Verified(identity) => roles.contains(&identity.role()),
            Self::Anonymous => false,
        }
    }

    /// Whether the caller may propose `op`.
    pub fn may_write(&self, op: &Op) -> bool {
        let roles: &[Role] = match op {
            Op::Claim(_)
            | Op::Complete { .. }
            | Op::Fail { .. }
            | Op::AdvanceStep { .. }
            | Op::TakeOver { .. }
            | Op::MarkUnknown { .. }
            | Op::Resolve { .. }
            | Op::Expire { .. }
            | Op::Purge { .. }
            | Op::Reseal { .. } => &[Role::Node, Role::Operator],
            // Failover and failback are the router's; seeding placements
            // and marking regions by hand, an operator's.
            Op::SetPlacement { .. }
            | Op::SetRegionStatus { .. }
            | Op::MoveRegion { .. }
            | Op::EvacuateRegion { .. }
            | Op::ReturnHome { .. } => &[Role::Router, Role::Operator],
            // Which group a tenant lives in is decided once, as it is
            // placed: an operator's.
            Op::AssignTenant { .. } => &[Role::Operator],
            // The leader proposes these itself (`crate::housekeeping`),
            // never through the client API.
            Op::RaiseWireVersion { .. }
            | Op::ForgetIdleClients { .. }
            | Op::DeclareRegions { .. } => &[],
        };
        self.is(roles)
    }

    /// Whether the caller may make `read`.
    pub fn may_read(&self, read: &Read) -> bool {
        let roles: &[Role] = match read {
            Read::Record { .. }
            | Read::Records(_)
            | Read::CountRecords(_)
            | Read::RecordOfPayment { .. }
            | Read::TenantPayments(_) => &[Role::Node, Role::Operator],
            Read::Placement { .. } | Read::Regions | Read::Assignment { .. } => {
                &[Role::Node, Role::Router, Role::Operator]
            }
            Read::Placements => &[Role::Router, Role::Operator],
        };
        self.is(roles)
    }

    fn describe(&self) -> String {
        match self {
            Self::Unchecked => "anyone".into(),
            Self::Verified(identity) => identity.uri(),
            Self::Anonymous => "a certificate naming no identity".into(),
        }
    }
}

/// The refusal every check answers with.
pub fn forbidden(caller: &Caller, what: &str) -> Response {
    (
        StatusCode::FORBIDDEN,
        axum::Json(serde_json::json!({
            "errorCode": "FORBIDDEN",
            "message": format!("{} may not {what}", caller.describe()),
        })),
    )
        .into_response()
}

/// Puts the [`Caller`] on the request for the handlers' per-call checks.
pub async fn identify(State(access): State<Access>, mut request: Request, next: Next) -> Response {
    let caller = Caller::of(access, &request);
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// Layer state: the access mode and the roles a route needs.
#[derive(Debug, Clone, Copy)]
pub struct Require {
    pub access: Access,
    pub roles: &'static [Role],
    pub what: &'static str,
}

/// Refuses, before the body is read, callers without one of the roles.
pub async fn require(State(need): State<Require>, request: Request, next: Next) -> Response {
    let caller = Caller::of(need.access, &request);
    if caller.is(need.roles) {
        next.run(request).await
    } else {
        forbidden(&caller, need.what)
    }
}

/// Every role of the CA: the routes any identity may call.
pub const ANY_ROLE: &[Role] = &Role::ALL;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::RegionStatus;

    fn caller(role: Role) -> Caller {
        Caller::Verified(Identity::new("eu-west", role).unwrap())
    }

    #[test]
    fn only_routers_and_operators_move_tenants_or_mark_regions() {
        let mark = Op::SetRegionStatus {
            region: "eu-west".into(),
            status: RegionStatus::Down,
        };
        let moved = Op::SetPlacement {
            tenant: "t".into(),
            expected_epoch: 0,
            home: "nowhere".into(),
            standbys: vec![],
        };
        let failover = Op::MoveRegion {
            from: "eu-west".into(),
            eligible: vec!["us-east".into()],
        };
        let failback = Op::ReturnHome {
            to: "eu-west".into(),
        };
        let evacuation = Op::EvacuateRegion {
            from: "eu-west".into(),
            eligible: vec!["us-east".into()],
        };
        for op in [&mark, &moved, &failover, &failback, &evacuation] {
            assert!(caller(Role::Router).may_write(op));
            assert!(caller(Role::Operator).may_write(op));
            assert!(!caller(Role::Node).may_write(op));
            assert!(!caller(Role::StoreMember).may_write(op));
            assert!(!Caller::Anonymous.may_write(op));
        }
    }

    #[test]
    fn record_dumps_are_for_nodes_and_operators_only() {
        let dump = Read::Records(Default::default());
        assert!(caller(Role::Node).may_read(&dump));
        assert!(caller(Role::Operator).may_read(&dump));
        assert!(!caller(Role::Router).may_read(&dump));
        assert!(!caller(Role::StoreMember).may_read(&dump));
        assert!(caller(Role::Router).may_read(&Read::Placements));
        assert!(!caller(Role::Node).may_read(&Read::Placements));
    }

    #[test]
    fn an_unchecked_caller_is_only_possible_in_plaintext_mode() {
        assert!(Caller::Unchecked.is(&[Role::StoreMember]));
        assert!(!Caller::Anonymous.is(ANY_ROLE));
    }
}
