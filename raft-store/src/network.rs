//! The sending side of Raft RPC over HTTP: one shared `reqwest::Client`
//! (connection pool per peer), postcard bodies, and the error mapping
//! openraft's replication relies on:
//!
//! | what happened | openraft error | openraft does |
//! |---|---|---|
//! | connection refused / reset before sending | `Unreachable` | backs off |
//! | timed out | `Timeout` | retries |
//! | other transport failure, undecodable answer | `Network` | retries at once |
//! | body over the limit (checked before sending, or 413) | `PayloadTooLarge` | halves the batch |
//! | the peer answered with a Raft error | `RemoteError` | acts on it |
//! | partitioned ([`crate::wan`]): cut off here, or refused by the peer | `Unreachable` | backs off |
//!
//! Every RPC carries this member's region (`X-Once-Region`) and, to a
//! member of another region, first waits the simulated WAN latency.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{NetworkError, PayloadTooLarge, RemoteError, Timeout, Unreachable};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::types::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotError, InstallSnapshotRequest,
    InstallSnapshotResponse, Node, NodeId, RaftError, RpcError, TypeConfig, VoteRequest,
    VoteResponse,
};
use crate::wan::{self, REGION_HEADER, SimulatedWan, WanConfig};
use crate::wire;

/// Paths of the Raft RPC listener.
pub const APPEND_PATH: &str = "/raft/append";
pub const VOTE_PATH: &str = "/raft/vote";
pub const SNAPSHOT_PATH: &str = "/raft/snapshot";
/// Whether a member has ever been part of a cluster (bootstrap asks).
pub const INITIALIZED_PATH: &str = "/raft/initialized";

/// Builds a connection to each peer from one shared HTTP client.
#[derive(Debug, Clone)]
pub struct Network {
    id: NodeId,
    http: reqwest::Client,
    max_body: usize,
    wan: Arc<SimulatedWan>,
}

impl Network {
    /// `local_address` binds outgoing sockets to this member's own address,
    /// so per-address firewall rules (a partition test) see who sends.
    pub fn new(
        id: NodeId,
        local_address: Option<IpAddr>,
        connect_timeout: Duration,
        max_body: usize,
    ) -> reqwest::Result<Self> {
        let http = reqwest::Client::builder()
            .local_address(local_address)
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .pool_max_idle_per_host(4)
            .build()?;
        Ok(Self {
            id,
            http,
            max_body,
            wan: Arc::new(SimulatedWan::new(WanConfig::alone(id))),
        })
    }

    /// Sends through `wan`: its latency and partition apply to every RPC.
    pub fn with_wan(self, wan: Arc<SimulatedWan>) -> Self {
        Self { wan, ..self }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Connection {
        Connection {
            id: self.id,
            target,
            base: format!("http://{}", node.addr),
            http: self.http.clone(),
            max_body: self.max_body,
            wan: self.wan.clone(),
        }
    }
}

/// RPCs to one peer.
#[derive(Debug)]
pub struct Connection {
    id: NodeId,
    target: NodeId,
    base: String,
    http: reqwest::Client,
    max_body: usize,
    wan: Arc<SimulatedWan>,
}

impl Connection {
    /// The error of an RPC the partition did not let through.
    fn partitioned<E: std::error::Error>(&self, by: &str) -> RpcError<E> {
        let e = std::io::Error::other(format!(
            "partitioned: {by} (member {} to member {})",
            self.id, self.target
        ));
        RpcError::Unreachable(Unreachable::new(&e))
    }

    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        action: RPCTypes,
        request: &Req,
        entries: u64,
        option: &RPCOption,
    ) -> Result<Resp, RpcError<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body = wire::encode(request).map_err(|e| RpcError::Network(NetworkError::new(&e)))?;
        if body.len() > self.max_body && entries > 1 {
            return Err(RpcError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint((entries / 2).max(1)),
            ));
        }
        // The simulated WAN: cut off, or one round trip away. Checked again
        // after the wait, as a link cut while the packet was on its way.
        if !self.wan.may_send_to(self.target) {
            return Err(self.partitioned("this member is isolated or the peer's region is cut"));
        }
        let delay = self.wan.delay_to(self.target);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
            if !self.wan.may_send_to(self.target) {
                return Err(self.partitioned("this member is isolated or the peer's region is cut"));
            }
        }
        // The simulated round trip is part of the RPC's time budget.
        let timeout = option
            .hard_ttl()
            .saturating_sub(delay)
            .max(Duration::from_millis(1));
        let sent = self
            .http
            .post(format!("{}{path}", self.base))
            .header(reqwest::header::CONTENT_TYPE, wire::CONTENT_TYPE)
            .header(REGION_HEADER, self.wan.region())
            .timeout(timeout)
            .body(body)
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Err(RpcError::Timeout(Timeout {
                    action,
                    id: self.id,
                    target: self.target,
                    timeout,
                }));
            }
            Err(e) if e.is_connect() => return Err(RpcError::Unreachable(Unreachable::new(&e))),
            Err(e) => return Err(RpcError::Network(NetworkError::new(&e))),
        };
        let status = response.status();
        if wan::is_partition_refusal(status.as_u16(), response.headers()) {
            return Err(self.partitioned("the peer is cut off from this region"));
        }
        if status == reqwest::StatusCode::PAYLOAD_TOO_LARGE && entries > 1 {
            return Err(RpcError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint((entries / 2).max(1)),
            ));
        }
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            let e = std::io::Error::other(format!("{path} answered {status}: {text}"));
            return Err(RpcError::Network(NetworkError::new(&e)));
        }
        let bytes = response.bytes().await.map_err(|e| {
            if e.is_timeout() {
                RpcError::Timeout(Timeout {
                    action,
                    id: self.id,
                    target: self.target,
                    timeout,
                })
            } else {
                RpcError::Network(NetworkError::new(&e))
            }
        })?;
        let answer: Result<Resp, RaftError<E>> =
            wire::decode(&bytes).map_err(|e| RpcError::Network(NetworkError::new(&e)))?;
        answer.map_err(|e| RpcError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse, RpcError> {
        let entries = rpc.entries.len() as u64;
        self.call(APPEND_PATH, RPCTypes::AppendEntries, &rpc, entries, &option)
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse, RpcError<InstallSnapshotError>> {
        self.call(SNAPSHOT_PATH, RPCTypes::InstallSnapshot, &rpc, 0, &option)
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest,
        option: RPCOption,
    ) -> Result<VoteResponse, RpcError> {
        self.call(VOTE_PATH, RPCTypes::Vote, &rpc, 0, &option).await
    }
}
