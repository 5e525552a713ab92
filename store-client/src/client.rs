//! The client library node and router use to reach raft-store.
//!
//! - **Finding the leader**: the client keeps a leader hint; a member that
//!   is not the leader answers `ForwardToLeader` with its guess, and the
//!   client maps member ids to endpoints by asking `/api/status` once.
//! - **Retrying safely**: every write carries `(client id, seq)`; the state
//!   machine applies a given pair once and stores its reply, so resending
//!   the *same* request after a timeout or a leader change is safe and
//!   returns the first outcome. A new seq is never used for a retry.
//! - **Ambiguity is reported, not guessed**: when the deadline passes and
//!   some attempt may have reached a leader (sent, then timed out, or
//!   refused by a member that may have stepped down mid-write), the answer
//!   is [`ClientError::Ambiguous`]; only when no attempt can have been
//!   proposed is it [`ClientError::Unavailable`].
//! - **Time**: the client stamps `now` into each command from its clock
//!   (with an optional offset, for skew tests), but the leader overwrites it
//!   with its own before proposing: no client's clock decides anything in
//!   the store. Members never read a clock while applying.
//! - **Simulated WAN** ([`crate::wan`]): with [`ClientOptions::wan_latency`],
//!   every request to an endpoint at index `local_endpoints` or beyond
//!   waits that long first (one round trip to another region); with
//!   [`ClientOptions::region`] every request declares the caller's region,
//!   so an isolated member, or one that has that region cut off, refuses
//!   it — a refusal the client counts as "not sent", like a connection
//!   refused.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::NodeId;
use crate::command::{
    ClientRequest, Millis, NewClaim, Op, Placement, Record, RegionStatus, Reply, Scope,
};
use crate::protocol::{
    Answer, Consistency, PaymentListQuery, READ_PATH, Read, ReadAnswer, ReadReply, RecordQuery,
    STATUS_PATH, Status, WRITE_PATH, WriteAnswer,
};
use crate::wan::{self, CLIENT_REGION_HEADER};
use crate::wire;

/// The longest wait between two rounds of the members while none leads.
/// An election across a 70 ms WAN ends about three round trips after it
/// starts; with 500 ms (before decision 0067) the router's failover write
/// waited 240 ms past the new leader's first commit, most of a failover's
/// tail. A waiting request now asks each member about ten times a second.
pub const MAX_BACKOFF: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The command may or may not have applied; only a read can tell.
    #[error("outcome unknown: {0}")]
    Ambiguous(String),
    /// No member could take the command; it did not apply.
    #[error("raft-store unavailable: {0}")]
    Unavailable(String),
    /// This seq was forgotten before it applied: it never will.
    #[error("the command was dropped as stale")]
    Stale,
    /// The command names a region the cluster does not know
    /// (`Reply::UnknownRegion`): nothing was written, and sending it again
    /// gets the same answer.
    #[error("raft-store knows no region {0:?} (UNKNOWN_REGION)")]
    UnknownRegion(String),
}

#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// One HTTP attempt. Default 5 s (a write waits for a WAN quorum and fsyncs).
    pub attempt_timeout: Duration,
    /// All attempts of one operation. Default 15 s (covers an election).
    pub deadline: Duration,
    /// Added to this machine's clock when stamping commands (tests only).
    pub clock_offset_ms: i64,
    /// Simulated WAN round trip to a member outside the caller's region,
    /// waited before every request to one. Default zero.
    pub wan_latency: Duration,
    /// How many of the endpoints, from the first, are in the caller's
    /// region (no `wan_latency`). Default 1.
    pub local_endpoints: usize,
    /// The caller's region, sent as `X-Once-Client-Region` so a member
    /// isolated from it, or cutting it off, refuses. Default none: every
    /// member serves it.
    pub region: Option<String>,
    /// This process's CA and certificate: every request is mutual TLS
    /// (`https`), and the members authorise it by the certificate's
    /// identity. `None`: plaintext, for members started with
    /// `--insecure-plaintext` only.
    pub tls: Option<once_tls::Tls>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            attempt_timeout: Duration::from_secs(5),
            deadline: Duration::from_secs(15),
            clock_offset_ms: 0,
            wan_latency: Duration::ZERO,
            local_endpoints: 1,
            region: None,
            tls: None,
        }
    }
}

impl ClientOptions {
    /// The simulated delay before a request to `endpoints[index]`.
    pub fn delay_to(&self, index: usize) -> Duration {
        if index < self.local_endpoints {
            Duration::ZERO
        } else {
            self.wan_latency
        }
    }
}

#[derive(Debug, Default)]
struct Session {
    next_seq: u64,
    /// Seqs sent and not yet answered to their caller.
    outstanding: BTreeSet<u64>,
    leader: Option<usize>,
    /// The term of the last member status that moved `leader`: an older
    /// word does not move it back.
    leader_term: u64,
    endpoint_of: HashMap<NodeId, usize>,
}

impl Session {
    /// What a status from `endpoints[i]` tells: which member answers
    /// there, and, in a term no older than the last such word, who leads.
    /// A node's readiness watch asks its nearest member every 100 ms, so
    /// a new leader is where its next write goes first, without a round
    /// of the members to find it (a dead leader's endpoint first, then a
    /// redirect).
    fn heard(&mut self, i: usize, status: &Status) {
        self.endpoint_of.insert(status.id, i);
        let Some(leader) = status.leader else { return };
        if status.term < self.leader_term {
            return;
        }
        if let Some(&at) = self.endpoint_of.get(&leader) {
            self.leader = Some(at);
            self.leader_term = status.term;
        }
    }
}

/// A raft-store client. Cheap to share (`Arc`); one per process is enough.
#[derive(Debug)]
pub struct StoreClient {
    endpoints: Vec<String>,
    http: reqwest::Client,
    client_id: u64,
    options: ClientOptions,
    session: Mutex<Session>,
}

enum Attempt<T> {
    Done(T),
    /// Failed after the request may have been delivered.
    Maybe(String),
    /// Failed before anything was delivered.
    NotSent(String),
}

/// A write whose outcome is unknown, held so it can be sent again as
/// itself ([`StoreClient::write_settled`]). While it lives its seq is
/// outstanding: the store keeps its reply. Dropped, it is abandoned like
/// any write whose caller gave up.
#[derive(Debug)]
pub struct Unsettled {
    client: Arc<StoreClient>,
    request: ClientRequest,
}

/// Why a [`StoreClient::write_settled`] has no reply.
#[derive(Debug, thiserror::Error)]
pub enum Unsettling {
    /// It may have applied; [`Unsettled::resend`] finds out.
    #[error("outcome unknown: {why}")]
    Unknown { write: Box<Unsettled>, why: String },
    /// It did not apply (or never will): the client's own errors.
    #[error(transparent)]
    Failed(ClientError),
}

impl Unsettled {
    /// The command, as sent.
    pub fn op(&self) -> &Op {
        &self.request.op
    }

    /// Sends the same `(client, seq)` again until an answer or the
    /// client's deadline: the store answers a write that had applied with
    /// its first reply, and applies one that had not.
    pub async fn resend(self) -> Result<Reply, Unsettling> {
        match self.client.send_write(&self.request).await {
            Ok(Reply::StaleSequence) => Err(Unsettling::Failed(ClientError::Stale)),
            Ok(reply) => Ok(reply),
            Err(ClientError::Ambiguous(why)) => Err(Unsettling::Unknown {
                write: Box::new(self),
                why,
            }),
            Err(e) => Err(Unsettling::Failed(e)),
        }
    }
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        self.client.session().outstanding.remove(&self.request.seq);
    }
}

/// A sequence number this client still waits on. Dropped — the write
/// answered, failed, or its caller gave up on it (a timeout, a closed
/// connection) — it stops holding back `acked_below`; otherwise one
/// abandoned write would make the store keep every later reply of this
/// client forever. A copy of the abandoned write that applies later still
/// applies at most once: below the floor it is refused as stale.
struct Outstanding<'a> {
    client: &'a StoreClient,
    seq: u64,
}

impl<'a> Outstanding<'a> {
    fn take_next(client: &'a StoreClient) -> Self {
        let mut s = client.session();
        let seq = s.next_seq;
        s.next_seq += 1;
        s.outstanding.insert(seq);
        Self { client, seq }
    }
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        self.client.session().outstanding.remove(&self.seq);
    }
}

impl StoreClient {
    /// The options this client was built with.
    pub fn options(&self) -> &ClientOptions {
        &self.options
    }

    /// `endpoints`: client API addresses (`host:port` or URLs) of the
    /// members; the first is preferred for reads of final records (put the
    /// local region's member first).
    pub fn new(endpoints: &[String], options: ClientOptions) -> reqwest::Result<Self> {
        let endpoints = endpoints
            .iter()
            .map(|e| crate::admin::url_of(e, options.tls.is_some()))
            .collect();
        let builder = match &options.tls {
            Some(tls) => tls.http_client().https_only(true),
            None => reqwest::Client::builder(),
        };
        Ok(Self {
            endpoints,
            http: builder
                .tcp_nodelay(true)
                .connect_timeout(Duration::from_secs(1))
                // Below the members' idle timeout (60 s by default), so a
                // pooled connection is never one the member is closing.
                .pool_idle_timeout(Duration::from_secs(30))
                .build()?,
            client_id: rand::random(),
            options,
            session: Mutex::new(Session {
                next_seq: 1,
                ..Session::default()
            }),
        })
    }

    /// How many members this client knows (`status_of` takes `0..` it).
    pub fn endpoints_len(&self) -> usize {
        self.endpoints.len()
    }

    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    /// The time stamped into the next command.
    pub fn now(&self) -> Millis {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        ms + self.options.clock_offset_ms
    }

    fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `op` exactly once (stamped with this client's clock) and
    /// returns its reply.
    pub async fn write(&self, op: Op) -> Result<Reply, ClientError> {
        let now = self.now();
        self.write_at(op, now).await
    }

    /// As [`Self::write`], with an explicit stamped time.
    pub async fn write_at(&self, op: Op, now: Millis) -> Result<Reply, ClientError> {
        let outstanding = Outstanding::take_next(self);
        let seq = outstanding.seq;
        let acked_below = self.session().outstanding.first().copied().unwrap_or(seq);
        let request = ClientRequest {
            client: self.client_id,
            seq,
            acked_below,
            now,
            op,
        };
        let result = self.send_write(&request).await;
        drop(outstanding);
        match result {
            Ok(Reply::StaleSequence) => Err(ClientError::Stale),
            other => other,
        }
    }

    /// As [`Self::write`], but an ambiguous outcome keeps the write: its
    /// `(client, seq)` stays outstanding (so the store keeps its reply)
    /// and [`Unsettled::resend`] sends the very same command again, whose
    /// answer is then its first outcome if it had applied — not a new
    /// command's, which cannot tell this client's earlier write from
    /// another's (RELIABILITY.md finding 21: a router counted no move when
    /// its evacuation's first answer was lost).
    pub async fn write_settled(self: &Arc<Self>, op: Op) -> Result<Reply, Unsettling> {
        // Outstanding until the `Unsettled` below is dropped (nothing is
        // awaited before it exists).
        let seq = {
            let mut s = self.session();
            let seq = s.next_seq;
            s.next_seq += 1;
            s.outstanding.insert(seq);
            seq
        };
        let acked_below = self.session().outstanding.first().copied().unwrap_or(seq);
        Unsettled {
            client: self.clone(),
            request: ClientRequest {
                client: self.client_id,
                seq,
                acked_below,
                now: self.now(),
                op,
            },
        }
        .resend()
        .await
    }

    async fn send_write(&self, request: &ClientRequest) -> Result<Reply, ClientError> {
        let body = wire::encode(request).map_err(|e| ClientError::Unavailable(e.to_string()))?;
        self.route(WRITE_PATH, body, |bytes| {
            wire::decode::<WriteAnswer>(bytes).map_err(|e| e.to_string())
        })
        .await
    }

    /// Reads a record linearizably (read-index on the leader): it reflects
    /// every write acknowledged before the call.
    pub async fn record(&self, scope: &Scope) -> Result<Option<Record>, ClientError> {
        self.read_record(scope, Consistency::Linearizable).await
    }

    /// Reads a record for replay: a final record may come from the
    /// preferred (nearest) member without a leader round trip; anything
    /// else is read linearizably.
    pub async fn record_for_replay(&self, scope: &Scope) -> Result<Option<Record>, ClientError> {
        let read = Read::Record {
            scope: scope.clone(),
            consistency: Consistency::FinalFromAnyMember,
        };
        if let Ok(body) = wire::encode(&read)
            && let Attempt::Done(Answer::Done(ReadReply::Record(Some(r)))) =
                self.attempt::<ReadAnswer>(0, READ_PATH, body).await
        {
            return Ok(Some(r));
        }
        self.record(scope).await
    }

    async fn read_record(
        &self,
        scope: &Scope,
        consistency: Consistency,
    ) -> Result<Option<Record>, ClientError> {
        let read = Read::Record {
            scope: scope.clone(),
            consistency,
        };
        match self.read(read).await? {
            ReadReply::Record(r) => Ok(r),
            other => Err(ClientError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    }

    /// How many records match `query`, its limit aside (linearizable).
    pub async fn count_records(&self, query: RecordQuery) -> Result<u64, ClientError> {
        match self.read(Read::CountRecords(query)).await? {
            ReadReply::Count(n) => Ok(n),
            other => Err(ClientError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    }

    /// The record that created payment `payment_id`, if it is `tenant`'s
    /// (linearizable).
    pub async fn record_of_payment(
        &self,
        tenant: &str,
        payment_id: &str,
    ) -> Result<Option<Record>, ClientError> {
        let read = Read::RecordOfPayment {
            tenant: tenant.to_owned(),
            payment_id: payment_id.to_owned(),
        };
        match self.read(read).await? {
            ReadReply::Record(r) => Ok(r),
            other => Err(ClientError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    }

    /// A page of one tenant's payments as the records that created them,
    /// in creation order (linearizable): see [`PaymentListQuery`].
    pub async fn tenant_payments(
        &self,
        query: PaymentListQuery,
    ) -> Result<Vec<Record>, ClientError> {
        match self.read(Read::TenantPayments(query)).await? {
            ReadReply::Records(records) => Ok(records),
            other => Err(ClientError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    }

    pub async fn placement(&self, tenant: &str) -> Result<Option<Placement>, ClientError> {
        match self
            .read(Read::Placement {
                tenant: tenant.to_owned(),
            })
            .await?
        {
            ReadReply::Placement(p) => Ok(p),
            other => Err(ClientError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    }

    /// Every region's status, linearizably (the router's view of health).
    pub async fn regions(&self) -> Result<Vec<(String, RegionStatus)>, ClientError> {
        match self.read(Read::Regions).await? {
            ReadReply::Regions(r) => Ok(r),
            other => Err(ClientError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    }

    /// Every tenant's placement, linearizably.
    pub async fn placements(&self) -> Result<Vec<(String, Placement)>, ClientError> {
        match self.read(Read::Placements).await? {
            ReadReply::Placements(p) => Ok(p),
            other => Err(ClientError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    }

    /// Records matching `query`, linearizably, oldest first.
    pub async fn records(&self, query: RecordQuery) -> Result<Vec<Record>, ClientError> {
        match self.read(Read::Records(query)).await? {
            ReadReply::Records(r) => Ok(r),
            other => Err(ClientError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    }

    async fn read(&self, read: Read) -> Result<ReadReply, ClientError> {
        let body = wire::encode(&read).map_err(|e| ClientError::Unavailable(e.to_string()))?;
        // A read changes nothing: an ambiguous read is simply unavailable.
        self.route(READ_PATH, body, |bytes| {
            wire::decode::<ReadAnswer>(bytes).map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| match e {
            ClientError::Ambiguous(m) => ClientError::Unavailable(m),
            other => other,
        })
    }

    /// Sends `body` to the leader, following redirects and retrying the
    /// same bytes until an answer or the deadline, backing off from 20 ms
    /// to [`MAX_BACKOFF`] between rounds of the members.
    async fn route<T>(
        &self,
        path: &str,
        body: Vec<u8>,
        decode: impl Fn(&[u8]) -> Result<Answer<T>, String>,
    ) -> Result<T, ClientError> {
        let deadline = tokio::time::Instant::now() + self.options.deadline;
        let mut maybe_sent = false;
        let mut last_error: String;
        let mut target = self.session().leader.unwrap_or(0);
        let mut backoff = Duration::from_millis(20);
        // Moving on to a member that may take the request — the leader a
        // member named, or the next one after a member that refused the
        // connection — is worth doing at once; a round of the members
        // without one that could is when to back off. (After an election
        // the first hop to the new leader otherwise waited out a backoff
        // of up to 500 ms.)
        let mut hops_since_backoff = 0;
        loop {
            let tried = target;
            let mut move_on_at_once = false;
            match self.attempt_raw(target, path, body.clone()).await {
                Attempt::Done(bytes) => match decode(&bytes) {
                    Ok(Answer::Done(value)) => {
                        self.session().leader = Some(target);
                        return Ok(value);
                    }
                    Ok(Answer::ForwardToLeader { leader }) => {
                        maybe_sent = true;
                        last_error = format!("member {target} is not the leader");
                        target = self.endpoint_for(leader, target).await;
                        move_on_at_once = leader.is_some() && target != tried;
                    }
                    Ok(Answer::Unavailable(e)) => {
                        maybe_sent = true;
                        last_error = e;
                        target = (target + 1) % self.endpoints.len();
                    }
                    Err(e) => {
                        maybe_sent = true;
                        last_error = e;
                        target = (target + 1) % self.endpoints.len();
                    }
                },
                Attempt::Maybe(e) => {
                    maybe_sent = true;
                    last_error = e;
                    target = (target + 1) % self.endpoints.len();
                }
                Attempt::NotSent(e) => {
                    last_error = e;
                    target = (target + 1) % self.endpoints.len();
                    move_on_at_once = true;
                }
            }
            if move_on_at_once
                && hops_since_backoff < self.endpoints.len()
                && tokio::time::Instant::now() < deadline
            {
                hops_since_backoff += 1;
                continue;
            }
            hops_since_backoff = 0;
            if tokio::time::Instant::now() + backoff >= deadline {
                return Err(if maybe_sent {
                    ClientError::Ambiguous(last_error)
                } else {
                    ClientError::Unavailable(last_error)
                });
            }
            // Back off between rounds: hammering members does not shorten
            // an election, but a wait longer than a round trip or two
            // outlasts it ([`MAX_BACKOFF`]).
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Where to go after `ForwardToLeader`: the leader's endpoint if known
    /// (asking every member's status once, together, to learn ids), else
    /// the next one.
    async fn endpoint_for(&self, leader: Option<NodeId>, current: usize) -> usize {
        let next = (current + 1) % self.endpoints.len();
        let Some(leader) = leader else { return next };
        if let Some(i) = self.session().endpoint_of.get(&leader) {
            return *i;
        }
        // Every member at once: one asked after another paid each one's
        // round trip (a dead one's connect included) before the write went on.
        let asked = (0..self.endpoints.len()).map(|i| self.status_of(i));
        futures::future::join_all(asked).await;
        self.session()
            .endpoint_of
            .get(&leader)
            .copied()
            .unwrap_or(next)
    }

    async fn attempt<A: serde::de::DeserializeOwned>(
        &self,
        target: usize,
        path: &str,
        body: Vec<u8>,
    ) -> Attempt<A> {
        match self.attempt_raw(target, path, body).await {
            Attempt::Done(bytes) => match wire::decode(&bytes) {
                Ok(a) => Attempt::Done(a),
                Err(e) => Attempt::Maybe(e.to_string()),
            },
            Attempt::Maybe(e) => Attempt::Maybe(e),
            Attempt::NotSent(e) => Attempt::NotSent(e),
        }
    }

    /// A request to `endpoints[target]`, after the simulated WAN delay and
    /// with the caller's region when it has one.
    async fn request_to(
        &self,
        target: usize,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        let delay = self.options.delay_to(target);
        if !delay.is_zero() {
            // Simulated network latency to another region, not a wait for
            // a condition.
            tokio::time::sleep(delay).await;
        }
        let url = format!("{}{path}", self.endpoints[target]);
        let request = self
            .http
            .request(method, url)
            .header(wire::VERSION_HEADER, wire::WIRE_VERSION)
            .timeout(self.options.attempt_timeout);
        match &self.options.region {
            Some(region) => request.header(CLIENT_REGION_HEADER, region),
            None => request,
        }
    }

    async fn attempt_raw(&self, target: usize, path: &str, body: Vec<u8>) -> Attempt<Vec<u8>> {
        let sent = self
            .request_to(target, reqwest::Method::POST, path)
            .await
            .header(reqwest::header::CONTENT_TYPE, wire::CONTENT_TYPE)
            .body(body)
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => match r.bytes().await {
                Ok(b) => Attempt::Done(b.to_vec()),
                Err(e) => Attempt::Maybe(e.to_string()),
            },
            // Refused at the member's door by a partition: nothing proposed.
            Ok(r) if wan::is_partition_refusal(r.status().as_u16(), r.headers()) => {
                Attempt::NotSent(format!("member {target} is partitioned from this region"))
            }
            // Refused by the member's authorisation, before any proposal.
            Ok(r) if r.status() == reqwest::StatusCode::FORBIDDEN => Attempt::NotSent(format!(
                "member {target} refused this identity: {}",
                r.text().await.unwrap_or_default()
            )),
            Ok(r) => Attempt::Maybe(format!("member answered {}", r.status())),
            // Connection refused: nothing reached the member.
            Err(e) if e.is_connect() => Attempt::NotSent(e.to_string()),
            Err(e) => Attempt::Maybe(e.to_string()),
        }
    }

    /// The status of the nearest member that has heard a leader within
    /// its lease, asked in endpoint order (this region's members first):
    /// what a caller judges the store's reach by
    /// ([`Status::leader_in_reach`]) without a round trip through the
    /// leader, so the answer costs the same however far away the leader
    /// is. A member of another region is asked only when none of this
    /// region's answers or has heard the leader — its own member just
    /// restarted, say, while the caller can still reach the leader through
    /// another; a member that refuses this caller's region (a partition)
    /// does not answer. When no member says the leader is in reach, the
    /// nearest one that answered; `None` when none answers.
    pub async fn nearest_status(&self) -> Option<Status> {
        let mut nearest = None;
        for i in 0..self.endpoints.len() {
            let Ok(status) = self.status_of(i).await else {
                continue;
            };
            if !matches!(status.leader_in_reach(Duration::ZERO), Some(Err(_))) {
                return Some(status);
            }
            nearest.get_or_insert(status);
        }
        nearest
    }

    /// The status of the member at `endpoints[i]`.
    pub async fn status_of(&self, i: usize) -> Result<Status, ClientError> {
        let response = self
            .request_to(i, reqwest::Method::GET, STATUS_PATH)
            .await
            .send()
            .await
            .map_err(|e| ClientError::Unavailable(e.to_string()))?;
        let status: Status = response
            .json()
            .await
            .map_err(|e| ClientError::Unavailable(e.to_string()))?;
        self.session().heard(i, &status);
        Ok(status)
    }

    // Commands by name, so callers read like the domain.

    pub async fn claim(&self, claim: NewClaim) -> Result<Reply, ClientError> {
        self.write(Op::Claim(claim)).await
    }

    /// Compare-and-set of a tenant's placement on its epoch: `Placement`
    /// when it applied, `PlacementConflict` (with the current one) when not.
    pub async fn set_placement(
        &self,
        tenant: &str,
        expected_epoch: u64,
        home: &str,
        standbys: &[String],
    ) -> Result<Reply, ClientError> {
        self.write(Op::SetPlacement {
            tenant: tenant.to_owned(),
            expected_epoch,
            home: home.to_owned(),
            standbys: standbys.to_vec(),
        })
        .await
    }

    /// In the directory group: `tenant` lives in `group` from now on
    /// ([`Op::AssignTenant`], wire version 5): `Assigned`, `TenantInUse`
    /// when this group already holds some of its state, or `NotAgreed`
    /// while the cluster is below version 5.
    pub async fn assign_tenant(&self, tenant: &str, group: &str) -> Result<Reply, ClientError> {
        self.write(Op::AssignTenant {
            tenant: tenant.to_owned(),
            group: group.to_owned(),
        })
        .await
    }

    /// The group `tenant` lives in as the answering member's copy of the
    /// directory says (`None`: the directory's own); see [`Read::Assignment`].
    pub async fn assignment(&self, tenant: &str) -> Result<Option<String>, ClientError> {
        let read = Read::Assignment {
            tenant: tenant.to_owned(),
        };
        match self.read(read).await? {
            ReadReply::Assignment(group) => Ok(group),
            other => Err(ClientError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    }

    /// Fails every tenant homed in `from` over to its first standby in
    /// `eligible`, in one write ([`Op::MoveRegion`]): `Moved`.
    pub async fn move_region(&self, from: &str, eligible: &[String]) -> Result<Reply, ClientError> {
        self.write(Op::MoveRegion {
            from: from.to_owned(),
            eligible: eligible.to_vec(),
        })
        .await
    }

    /// Fails `from` over in one write whose apply costs the same at any
    /// number of tenants ([`Op::EvacuateRegion`], wire version 4):
    /// `Evacuated`, or `NotAgreed` while the cluster is below version 4
    /// (then nothing was written).
    pub async fn evacuate_region(
        &self,
        from: &str,
        eligible: &[String],
    ) -> Result<Reply, ClientError> {
        self.write(Op::EvacuateRegion {
            from: from.to_owned(),
            eligible: eligible.to_vec(),
        })
        .await
    }

    /// [`Self::evacuate_region`], kept for [`Unsettled::resend`] when its
    /// outcome is unknown ([`Self::write_settled`]).
    pub async fn evacuate_region_settled(
        self: &Arc<Self>,
        from: &str,
        eligible: &[String],
    ) -> Result<Reply, Unsettling> {
        self.write_settled(Op::EvacuateRegion {
            from: from.to_owned(),
            eligible: eligible.to_vec(),
        })
        .await
    }

    /// Sends every tenant whose preferred home is `to`, and which lives
    /// elsewhere, home in one write ([`Op::ReturnHome`]): `Moved`.
    pub async fn return_home(&self, to: &str) -> Result<Reply, ClientError> {
        self.write(Op::ReturnHome { to: to.to_owned() }).await
    }

    /// A region's status: `ClientError::UnknownRegion` when the cluster
    /// does not know the region.
    pub async fn set_region_status(
        &self,
        region: &str,
        status: RegionStatus,
    ) -> Result<(), ClientError> {
        match self
            .write(Op::SetRegionStatus {
                region: region.to_owned(),
                status,
            })
            .await?
        {
            Reply::UnknownRegion { region } => Err(ClientError::UnknownRegion(region)),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_endpoints_past_the_local_ones_pay_the_wan_latency() {
        let options = ClientOptions {
            wan_latency: Duration::from_millis(70),
            local_endpoints: 2,
            ..ClientOptions::default()
        };
        assert_eq!(options.delay_to(0), Duration::ZERO);
        assert_eq!(options.delay_to(1), Duration::ZERO);
        assert_eq!(options.delay_to(2), Duration::from_millis(70));
        assert_eq!(ClientOptions::default().delay_to(5), Duration::ZERO);
    }

    #[test]
    fn a_members_status_points_writes_at_the_leader_it_names_unless_older_news() {
        let status = |id, leader, term| Status {
            id,
            leader,
            term,
            ..Status::default()
        };
        let mut session = Session::default();
        // Member 3 names member 2, whose endpoint is not known yet.
        session.heard(2, &status(3, Some(2), 1));
        assert_eq!(session.leader, None);
        session.heard(1, &status(2, Some(2), 1));
        assert_eq!(session.leader, Some(1));
        // An election: member 3 leads in term 2.
        session.heard(2, &status(3, Some(3), 2));
        assert_eq!(session.leader, Some(2));
        // A member that has not heard of it yet names the old leader.
        session.heard(1, &status(2, Some(2), 1));
        assert_eq!(session.leader, Some(2));
        // One mid-election names none: nothing moves.
        session.heard(0, &status(1, None, 3));
        assert_eq!(session.leader, Some(2));
        assert_eq!(session.endpoint_of, HashMap::from([(1, 0), (2, 1), (3, 2)]));
    }

    #[tokio::test]
    async fn a_write_its_caller_gave_up_on_no_longer_holds_back_acked_below() {
        // A member that takes every write and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let app = axum::Router::new().route(
            WRITE_PATH,
            axum::routing::post(std::future::pending::<&'static str>),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = StoreClient::new(&[addr], ClientOptions::default()).unwrap();
        let op = Op::SetRegionStatus {
            region: "eu-west".into(),
            status: crate::command::RegionStatus::Healthy,
        };

        let gave_up = tokio::time::timeout(Duration::from_millis(50), client.write(op)).await;
        assert!(gave_up.is_err(), "the member never answers");
        assert!(
            client.session().outstanding.is_empty(),
            "the abandoned sequence number is released"
        );
        assert_eq!(client.session().next_seq, 2);
    }
}
