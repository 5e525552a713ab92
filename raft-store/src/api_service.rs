//! The client API and the admin endpoints of one member, each on its own
//! listener.
//!
//! | listener | routes | credential |
//! |---|---|---|
//! | client API | write, read, status, `/healthz`, `/readyz` | a client certificate; each command and read by role ([`crate::authz`]) |
//! | admin | `/healthz`, `/readyz` | TLS, no client certificate needed (probes) |
//! | admin | status, `/metrics` | a client certificate of the CA |
//! | admin | records dump, add-learner, change-membership, snapshot, elect, partition | an operator's certificate and the admin token |
//!
//! Writes go through group commit; linearizable reads through the coalesced
//! read index. A read that only needs a *final* record (`COMPLETED` or
//! `FAILED_REPLAYABLE`) may be answered from this member's own copy, leader
//! or not: a final record never changes inside its replay window (owner
//! writes apply only to unfinished records, takeovers only to unfinished,
//! retryable or expired ones), so any member that has applied it holds the
//! same bytes the leader would return. A member that has not applied it yet
//! answers `NotFinalHere` and the client asks the leader.
//!
//! `GET /healthz` answers while the process serves; `GET /readyz` only while
//! this member belongs to the cluster's membership and knows a leader — a
//! member that restarted is ready once it has rejoined, which is what a
//! rolling upgrade must wait for before it restarts the next one.
//!
//! `GET|POST /admin/partition` shows or sets this member's partition state
//! ([`crate::wan`]): `{"isolated": bool, "cut_regions": [..], "refuse_from":
//! [..]}`, each field optional on `POST`. While isolated, requests of
//! clients that declare another region (`X-Once-Client-Region`) are
//! refused; while a region is cut or refused, requests of clients that
//! declare it are refused. Requests that declare no region are always
//! served.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use once_edge::{AdminToken, EdgeMetrics};
use once_tls::Role;
use openraft::ServerState;

use crate::authz::{self, Access, Caller, Require};
use crate::command::{Record, Reply};
use crate::group_commit::GroupCommit;
use crate::leadership::election::ElectionMetrics;
use crate::leadership::read_index::ReadIndex;
use crate::metrics::GroupReport;
use crate::pipeline::PipelineMetrics;
use crate::protocol::{
    ADD_LEARNER_PATH, AddLearner, Answer, CHANGE_MEMBERSHIP_PATH, ChangeMembership, Consistency,
    ELECT_PATH, READ_PATH, RECORDS_PATH, Read, ReadAnswer, ReadReply, SNAPSHOT_PATH, STATUS_PATH,
    Status, WRITE_PATH, WireStatus, WriteAnswer, WriteRequest,
};
use crate::state_machine::StateMachine;
use crate::types::{ClientWriteError, Node, NodeId, Raft, RaftError, StorageError};
use crate::wan::{self, CLIENT_REGION_HEADER, PARTITION_PATH, SetPartition, SimulatedWan};
use crate::wire::Postcard;
use crate::wire_versions::{self, WireVersions};

/// What every handler shares.
pub struct ApiState {
    /// The group this state serves: `None` for the directory (the first).
    pub group: Option<String>,
    /// Every group of this member, for the member's `/metrics`.
    pub hosted: HostedGroups,
    /// The operator endpoints' token; `None` turns them off (404).
    pub admin_token: Option<Arc<AdminToken>>,
    /// The edge's metrics of this member's three listeners.
    pub edge: EdgeMetrics,
    /// What this member's lanes did while it led.
    pub pipeline: PipelineMetrics,
    pub elections: ElectionMetrics,
    /// This group's background tasks, for `/metrics`.
    pub tasks: Arc<crate::tasks::GroupTasks>,
    /// Whether callers' identities are checked (always, but with
    /// `--insecure-plaintext`).
    pub access: Access,
    pub id: NodeId,
    pub raft: Raft,
    /// A clone of the state machine: reads go straight to redb (MVCC read
    /// transactions never block apply).
    pub state_machine: StateMachine,
    pub group_commit: GroupCommit,
    pub read_index: ReadIndex,
    pub raft_addr: String,
    pub api_addr: String,
    /// The simulated WAN this member's transports share: the partition
    /// endpoint flips it, the client API consults it.
    pub wan: Arc<SimulatedWan>,
    /// This member's clock and its checks against its peers'.
    pub clock: Arc<crate::clock::ClockGuard>,
    /// The wire version each member speaks, this one's included.
    pub versions: Arc<WireVersions>,
    /// The cluster's regions as this member is configured (empty: none):
    /// a command naming another is refused before it is proposed, as the
    /// apply refuses it once they are declared (`crate::known_regions`).
    pub regions: BTreeSet<String>,
}

/// The states of every group a member hosts, each added as its group
/// starts. Weak, so that no group's state keeps its siblings alive.
#[derive(Debug, Clone, Default)]
pub struct HostedGroups(Arc<std::sync::RwLock<Vec<std::sync::Weak<ApiState>>>>);

impl HostedGroups {
    pub fn add(&self, state: &Arc<ApiState>) {
        self.0
            .write()
            .expect("the hosted groups' lock is never poisoned")
            .push(Arc::downgrade(state));
    }

    fn all(&self) -> Vec<Arc<ApiState>> {
        self.0
            .read()
            .expect("the hosted groups' lock is never poisoned")
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect()
    }
}

impl ApiState {
    /// The `group` label of this state's metrics.
    fn group_label(&self) -> String {
        self.group
            .clone()
            .unwrap_or_else(|| crate::metrics::DIRECTORY_LABEL.to_owned())
    }
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The client API: what nodes and routers call.
pub fn client_router(state: Arc<ApiState>) -> Router {
    Router::new()
        .route(WRITE_PATH, post(write))
        .route(READ_PATH, post(read))
        .route(STATUS_PATH, get(status))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        // Clients of another region cannot reach an isolated member.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            refuse_across_partition,
        ))
        // The caller, for the per-command and per-read checks.
        .route_layer(axum::middleware::from_fn_with_state(
            state.access,
            authz::identify,
        ))
        // Outside the partition check: a caller with no identity learns
        // nothing, not even that the member is isolated.
        .route_layer(axum::middleware::from_fn_with_state(
            Require {
                access: state.access,
                roles: authz::ANY_ROLE,
                what: "use the client API",
            },
            authz::require,
        ))
        // A server span per request, continuing the caller's trace.
        .layer(axum::middleware::from_fn(server_span))
        // Every answer declares this member's wire version.
        .layer(axum::middleware::from_fn_with_state(
            state.versions.clone(),
            wire_versions::declare,
        ))
        .with_state(state)
}

/// The admin listener: operators and Prometheus. Never behind the
/// simulated partition: an operator must always reach it.
pub fn admin_router(state: Arc<ApiState>) -> Router {
    let operator_only = Router::new()
        .route(RECORDS_PATH, get(records))
        .route(ADD_LEARNER_PATH, post(add_learner))
        .route(CHANGE_MEMBERSHIP_PATH, post(change_membership))
        .route(SNAPSHOT_PATH, post(snapshot))
        .route(ELECT_PATH, post(elect))
        .route(PARTITION_PATH, get(partition).post(set_partition));
    #[cfg(feature = "failpoints")]
    let operator_only =
        operator_only.route(crate::protocol::CLOCK_ADVANCE_PATH, post(advance_clock));
    let operator_only = operator_only
        .route_layer(axum::middleware::from_fn_with_state(
            state.admin_token.clone(),
            once_edge::admin::require,
        ))
        // Outside the token check: only an operator's certificate gets as
        // far as presenting a token.
        .route_layer(axum::middleware::from_fn_with_state(
            Require {
                access: state.access,
                roles: &[Role::Operator],
                what: "change membership, elect, snapshot, partition or dump records, move the clock",
            },
            authz::require,
        ));
    Router::new()
        .merge(operator_only)
        .route(STATUS_PATH, get(status))
        .route("/metrics", get(metrics))
        .route_layer(axum::middleware::from_fn_with_state(
            Require {
                access: state.access,
                roles: authz::ANY_ROLE,
                what: "use the admin listener",
            },
            authz::require,
        ))
        // After the layer above, so outside it: the only routes a client
        // without a certificate (a kubelet's probe) gets an answer from.
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .layer(axum::middleware::from_fn(server_span))
        .with_state(state)
}

async fn server_span(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    use tracing::Instrument;
    let name = format!("store {}", request.uri().path());
    let span = tracing::info_span!("store request", otel.name = %name, otel.kind = "server");
    once_telemetry::context::set_remote_parent(&span, request.headers());
    next.run(request).instrument(span).await
}

async fn refuse_across_partition(
    State(state): State<Arc<ApiState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let from = wan::header(request.headers(), CLIENT_REGION_HEADER);
    if state.wan.accepts_client(from) {
        next.run(request).await
    } else {
        state.wan.refusal(from)
    }
}

async fn partition(State(state): State<Arc<ApiState>>) -> Response {
    Json(state.wan.state()).into_response()
}

/// Isolates this member's region from the others, cuts some other regions
/// off from it (both ways, or only their requests to it), or heals any.
async fn set_partition(
    State(state): State<Arc<ApiState>>,
    Json(request): Json<SetPartition>,
) -> Response {
    match state.wan.apply(request) {
        Ok(now) => {
            tracing::warn!(
                isolated = now.isolated,
                cut_regions = ?now.cut_regions,
                refuse_from = ?now.refuse_from,
                region = %now.region,
                "simulated partition changed"
            );
            Json(now).into_response()
        }
        Err(e) => (StatusCode::UNPROCESSABLE_ENTITY, e.to_string()).into_response(),
    }
}

#[tracing::instrument(name = "raft write", skip_all)]
async fn write(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    Postcard(request): Postcard<WriteRequest>,
) -> Response {
    if !caller.may_write(&request.op) {
        return authz::forbidden(&caller, "propose this command");
    }
    // Before the cluster has declared its regions (the leader does so
    // within a round of housekeeping), this member's own list refuses.
    if let Some(region) =
        crate::known_regions::first_unknown(&state.regions, &request.op.regions_named())
    {
        let region = region.to_owned();
        return Postcard(WriteAnswer::Done(Reply::UnknownRegion { region })).into_response();
    }
    // A client's command of a wire version the cluster has not moved to is
    // not proposed: a member of the build before could not decode it. (The
    // leader's own version-2 commands check this where they are proposed,
    // in `housekeeping`.)
    let needs = request.op.wire_version();
    if needs > 1 {
        match state.state_machine.wire_version() {
            Ok(cluster) if cluster >= needs => {}
            Ok(cluster) => {
                return Postcard(WriteAnswer::Done(Reply::NotAgreed { needs, cluster }))
                    .into_response();
            }
            Err(e) => return Postcard(WriteAnswer::Unavailable(e.to_string())).into_response(),
        }
    }
    Postcard(state.group_commit.submit(request).await).into_response()
}

async fn read(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    Postcard(read): Postcard<Read>,
) -> Response {
    if !caller.may_read(&read) {
        return authz::forbidden(&caller, "make this read");
    }
    Postcard(serve_read(&state, read).await).into_response()
}

async fn serve_read(state: &ApiState, read: Read) -> ReadAnswer {
    match read {
        Read::Record {
            scope,
            consistency: Consistency::FinalFromAnyMember,
        } => match state.state_machine.record(&scope) {
            Ok(Some(record)) if record.status.is_replayable() => {
                Answer::Done(ReadReply::Record(Some(record)))
            }
            Ok(_) => Answer::Done(ReadReply::NotFinalHere),
            Err(e) => Answer::Unavailable(e.to_string()),
        },
        Read::Record {
            scope,
            consistency: Consistency::Linearizable,
        } => linearizable(state, |sm| sm.record(&scope).map(ReadReply::Record)).await,
        Read::Regions => linearizable(state, |sm| sm.regions().map(ReadReply::Regions)).await,
        Read::Placements => {
            linearizable(state, |sm| sm.placements().map(ReadReply::Placements)).await
        }
        Read::Records(query) => {
            linearizable(state, |sm| sm.query(&query).map(ReadReply::Records)).await
        }
        Read::CountRecords(query) => {
            linearizable(state, |sm| sm.count(&query).map(ReadReply::Count)).await
        }
        Read::RecordOfPayment { tenant, payment_id } => {
            linearizable(state, |sm| {
                let record = sm.record_of_payment(&payment_id)?;
                Ok(ReadReply::Record(
                    record.filter(|r| r.scope.tenant == tenant),
                ))
            })
            .await
        }
        Read::TenantPayments(query) => {
            linearizable(state, |sm| {
                sm.tenant_payments(&query).map(ReadReply::Records)
            })
            .await
        }
        Read::Assignment { tenant } => match state.state_machine.assignment(&tenant) {
            Ok(group) => Answer::Done(ReadReply::Assignment(group)),
            Err(e) => Answer::Unavailable(e.to_string()),
        },
        Read::Placement { tenant } => {
            linearizable(state, |sm| sm.placement(&tenant).map(ReadReply::Placement)).await
        }
    }
}

/// Reads `read` from this member's state machine once the read index says
/// it reflects every write acknowledged before the call (or says where the
/// leader is, or that it cannot tell).
async fn linearizable(
    state: &ApiState,
    read: impl FnOnce(&StateMachine) -> Result<ReadReply, StorageError>,
) -> ReadAnswer {
    match state.read_index.barrier().await {
        Answer::Done(()) => match read(&state.state_machine) {
            Ok(reply) => Answer::Done(reply),
            Err(e) => Answer::Unavailable(e.to_string()),
        },
        Answer::ForwardToLeader { leader } => Answer::ForwardToLeader { leader },
        Answer::Unavailable(e) => Answer::Unavailable(e),
    }
}

/// The directory's `/metrics` is the member's: every group it hosts. A
/// group's own (`/groups/<name>/metrics`) is that group's.
async fn metrics(State(state): State<Arc<ApiState>>) -> impl IntoResponse {
    let states = match state.group {
        None => state.hosted.all(),
        Some(_) => vec![state.clone()],
    };
    let reports: Vec<GroupReport<'_>> = states
        .iter()
        .map(|s| GroupReport {
            group: s.group_label(),
            status: status_of(s),
            pipeline: &s.pipeline,
            elections: &s.elections,
            tasks: s.tasks.report(),
        })
        .collect();
    crate::metrics::render(&state.edge, &reports)
}

pub fn status_of(state: &ApiState) -> Status {
    let m = state.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let learners: Vec<NodeId> = membership.learner_ids().collect();
    let last = m.last_log_index.unwrap_or(0);
    let follower_lag: BTreeMap<NodeId, Option<u64>> = m
        .replication
        .as_ref()
        .map(|r| {
            r.iter()
                .filter(|(id, _)| **id != m.id)
                .map(|(id, matched)| (*id, matched.map(|l| last.saturating_sub(l.index))))
                .collect()
        })
        .unwrap_or_default();
    // Committed: on the leader, the highest index a quorum of voters has
    // matched (computed from replication progress); elsewhere the best this
    // member knows is what it has applied.
    let committed_index = match &m.replication {
        Some(progress) if !voters.is_empty() => {
            let mut matched: Vec<u64> = voters
                .iter()
                .map(|id| {
                    if *id == m.id {
                        m.last_log_index.unwrap_or(0)
                    } else {
                        progress.get(id).copied().flatten().map_or(0, |l| l.index)
                    }
                })
                .collect();
            matched.sort_unstable_by(|a, b| b.cmp(a));
            Some(matched[voters.len() / 2])
        }
        _ => m.last_applied.map(|l| l.index),
    };
    let members: Vec<NodeId> = membership.nodes().map(|(id, _)| *id).collect();
    let wire = WireStatus {
        speaks: state.versions.speaks(),
        cluster: state.state_machine.wire_version().unwrap_or(1),
        members: state.versions.members(),
        agreed: state.versions.agreed(members.clone()),
    };
    // Every group this member hosts hears its peers: the freshest word
    // of each is the member's.
    let mut peers_heard: BTreeMap<NodeId, u64> = BTreeMap::new();
    for hosted in state.hosted.all() {
        for (peer, ago) in hosted.clock.peers_heard() {
            let ago = u64::try_from(ago.as_millis()).unwrap_or(u64::MAX);
            peers_heard
                .entry(peer)
                .and_modify(|best| *best = (*best).min(ago))
                .or_insert(ago);
        }
    }
    let member_regions = members
        .iter()
        .map(|id| {
            let region = if *id == state.id {
                state.wan.region().to_owned()
            } else {
                state.wan.region_of(*id)
            };
            (*id, region)
        })
        .collect();
    Status {
        region: Some(state.wan.region().to_owned()),
        member_regions,
        peers_heard_ms_ago: peers_heard,
        known_regions: state
            .state_machine
            .known_regions()
            .map(|known| known.into_iter().collect())
            .unwrap_or_default(),
        wire,
        remembered_clients: state.state_machine.remembered_clients().ok(),
        leader_heard_ms_ago: state
            .clock
            .since_leader_heard(&voters, m.current_leader)
            .map(|d| d.as_millis() as u64),
        leader_lease_ms: Some(state.raft.config().election_timeout_max),
        id: state.id,
        raft_addr: state.raft_addr.clone(),
        api_addr: state.api_addr.clone(),
        state: format!("{:?}", m.state),
        leader: m.current_leader,
        term: m.current_term,
        last_log_index: m.last_log_index,
        committed_index,
        applied_index: m.last_applied.map(|l| l.index),
        snapshot_index: m.snapshot.map(|l| l.index),
        purged_index: m.purged.map(|l| l.index),
        voters: voters.into_iter().collect(),
        learners,
        follower_lag,
    }
}

async fn status(State(state): State<Arc<ApiState>>) -> Json<Status> {
    Json(status_of(&state))
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

async fn readyz(State(state): State<Arc<ApiState>>) -> Response {
    let m = state.raft.metrics().borrow().clone();
    let member = m
        .membership_config
        .membership()
        .get_node(&state.id)
        .is_some();
    let not_ready = |reason: &str| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "status": "not ready", "reason": reason })),
        )
            .into_response()
    };
    match (member, m.current_leader) {
        (false, _) => not_ready("not (yet) a member of the cluster"),
        (true, None) => not_ready("no leader known"),
        (true, Some(leader)) => {
            Json(serde_json::json!({ "status": "ready", "leader": leader })).into_response()
        }
    }
}

/// This member's applied records, for invariant checks after fault tests.
async fn records(State(state): State<Arc<ApiState>>) -> Response {
    match state.state_machine.all_records() {
        Ok(r) => Postcard::<Vec<Record>>(r).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn admin_answer<T>(result: Result<T, RaftError<ClientWriteError>>) -> Response {
    match result {
        Ok(_) => Json(serde_json::json!({"ok": true})).into_response(),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => (
            StatusCode::MISDIRECTED_REQUEST,
            Json(serde_json::json!({"ok": false, "leader": f.leader_id})),
        )
            .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"ok": false, "error": e.to_string()})),
        )
            .into_response(),
    }
}

/// A membership action refused before raft sees it: `status`, with a
/// stable `code` and the reason.
fn refusal(status: StatusCode, code: &str, why: String) -> Response {
    let body = serde_json::json!({ "ok": false, "code": code, "error": why });
    (status, Json(body)).into_response()
}

async fn add_learner(State(state): State<Arc<ApiState>>, Json(req): Json<AddLearner>) -> Response {
    if let Some(why) = address_of_another_group(state.group.as_deref(), &req.raft_addr) {
        return refusal(
            StatusCode::BAD_REQUEST,
            "learner_address_of_another_group",
            why,
        );
    }
    let node = Node {
        addr: req.raft_addr,
    };
    admin_answer(state.raft.add_learner(req.id, node, true).await)
}

async fn change_membership(
    State(state): State<Arc<ApiState>>,
    Json(req): Json<ChangeMembership>,
) -> Response {
    let voters: BTreeSet<NodeId> = req.voters.into_iter().collect();
    let m = state.raft.metrics().borrow().clone();
    if m.state == ServerState::Leader {
        let current: BTreeSet<NodeId> = m.membership_config.membership().voter_ids().collect();
        if let Some(why) = too_wide(&current, &voters) {
            return refusal(StatusCode::CONFLICT, "membership_change_too_wide", why);
        }
    }
    admin_answer(state.raft.change_membership(voters, false).await)
}

/// Why a learner's `raft_addr` is refused by `group`'s admin endpoint (the
/// directory's: `None`), if it is: a member serves each of its groups at
/// `host:port/groups/<name>` and the directory at `host:port`, so an
/// address with another group's path (or none, for a group) would make
/// this group's leader send its log to another group of the learner
/// (RELIABILITY finding 15).
fn address_of_another_group(group: Option<&str>, raft_addr: &str) -> Option<String> {
    let (host, path) = raft_addr.split_once('/').unwrap_or((raft_addr, ""));
    let expected = group.map(crate::protocol::group_path).unwrap_or_default();
    (path.trim_end_matches('/') != expected.trim_start_matches('/')).then(|| {
        let this = group.map_or("the directory".to_owned(), |g| format!("group {g}"));
        format!(
            "raft address {raft_addr} does not reach {this} on that member; {this}'s is \
             {host}{expected}"
        )
    })
}

/// Why a change from `current` to `next` voters is refused, if it is: the
/// new voters must keep a majority of the current ones. A set that keeps
/// fewer would let members that may not hold every committed entry (a
/// learner that just caught up, a member wiped and re-added) decide alone;
/// an operator who means it goes there one member at a time.
fn too_wide(current: &BTreeSet<NodeId>, next: &BTreeSet<NodeId>) -> Option<String> {
    let kept = current.intersection(next).count();
    (kept * 2 <= current.len()).then(|| {
        format!(
            "voters {next:?} keep {kept} of the current {current:?}: a change must keep a \
             majority of them (change one member at a time)"
        )
    })
}

/// Builds a snapshot now (and purges the log behind it per configuration).
async fn snapshot(State(state): State<Arc<ApiState>>) -> Response {
    match state.raft.trigger().snapshot().await {
        Ok(()) => Json(serde_json::json!({"ok": true})).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}

/// Test builds only (`CLOCK_ADVANCE_PATH`): moves this member's clock
/// forward by the body's milliseconds, so scenario tests can run a lease or
/// a replay window out without waiting (every member is moved; see
/// `crate::clock`).
#[cfg(feature = "failpoints")]
async fn advance_clock(State(state): State<Arc<ApiState>>, Json(by_ms): Json<i64>) -> Response {
    state.clock.advance(by_ms);
    Json(serde_json::json!({"now": state.clock.now()})).into_response()
}

/// Starts an election on this member now (to move leadership to a region
/// before maintenance elsewhere). It wins if its log is up to date.
async fn elect(State(state): State<Arc<ApiState>>) -> Response {
    match state.raft.trigger().elect().await {
        Ok(()) => Json(serde_json::json!({"ok": true})).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_learner_is_added_under_the_address_of_the_group_it_joins() {
        let directory = None;
        let us = Some("us-east");
        assert_eq!(address_of_another_group(directory, "10.0.0.4:7001"), None);
        assert_eq!(address_of_another_group(directory, "10.0.0.4:7001/"), None);
        assert_eq!(
            address_of_another_group(us, "10.0.0.4:7001/groups/us-east"),
            None
        );
        assert_eq!(
            address_of_another_group(us, "10.0.0.4:7001/groups/us-east/"),
            None
        );
        assert_eq!(
            address_of_another_group(us, "10.0.0.4:7001").as_deref(),
            Some(
                "raft address 10.0.0.4:7001 does not reach group us-east on that member; group \
                 us-east's is 10.0.0.4:7001/groups/us-east"
            )
        );
        assert!(address_of_another_group(us, "10.0.0.4:7001/groups/eu-west").is_some());
        assert!(address_of_another_group(us, "10.0.0.4:7001/groups/us-east-2").is_some());
        assert_eq!(
            address_of_another_group(directory, "10.0.0.4:7001/groups/us-east").as_deref(),
            Some(
                "raft address 10.0.0.4:7001/groups/us-east does not reach the directory on that \
                 member; the directory's is 10.0.0.4:7001"
            )
        );
    }

    #[test]
    fn a_membership_change_keeps_a_majority_of_the_current_voters() {
        // One member out, one in, one replaced: allowed.
        assert_eq!(too_wide(&set(&[1, 2, 3]), &set(&[1, 2])), None);
        assert_eq!(too_wide(&set(&[2, 3]), &set(&[1, 2, 3])), None);
        assert_eq!(too_wide(&set(&[1, 2, 3]), &set(&[1, 2, 4])), None);
        // A re-added learner alone, or two of three dropped: refused.
        assert!(too_wide(&set(&[2, 3]), &set(&[1])).is_some());
        assert!(too_wide(&set(&[1, 2, 3]), &set(&[3])).is_some());
        assert!(too_wide(&set(&[1, 2]), &set(&[2, 3])).is_some());
    }
}
