//! A member's configuration, with defaults chosen for regions about 100 ms
//! apart (one voter per region).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use once_edge::{AdminToken, ServerLimits};

use crate::types::NodeId;
use crate::wan::WanConfig;

/// Timeouts and limits of the Raft protocol and its transport.
#[derive(Debug, Clone)]
pub struct Timing {
    /// Leader heartbeat, and the timeout of one append-entries RPC (openraft
    /// uses the heartbeat interval for both). Default 300 ms: three WAN
    /// round trips, so a slow link is not mistaken for a dead one.
    pub heartbeat: Duration,
    /// The election timeout's range. `election_max` is also the leader's
    /// lease: under openraft 0.9 a member that heard a leader grants no
    /// vote until it has passed. A member campaigns ([`crate::leadership::election`])
    /// after `election_max` plus a random `0..(election_max -
    /// election_min)` of silence, and only once a majority answered its
    /// pre-vote. So with the defaults (600–900 ms) a dead leader is
    /// replaced 0.9–1.2 s after it was last heard, plus a round trip; one
    /// member that misses heartbeats (a lost packet, a stall, a cut link)
    /// starts no election while the others still hear the leader (decision
    /// 0061; 1.5–1.8 s under openraft's own timer, decision 0057).
    pub election_min: Duration,
    pub election_max: Duration,
    /// Timeout of one snapshot chunk. Default 30 s: a chunk of
    /// `snapshot_chunk` bytes over a slow WAN link.
    pub snapshot_chunk_timeout: Duration,
    /// Connect timeout of the peer HTTP client. Default 1 s.
    pub connect_timeout: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_millis(300),
            election_min: Duration::from_millis(600),
            election_max: Duration::from_millis(900),
            snapshot_chunk_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(1),
        }
    }
}

#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub id: NodeId,
    pub raft_addr: SocketAddr,
    pub api_addr: SocketAddr,
    /// The operator listener: membership, elections, snapshots, record
    /// dumps, the partition switch (behind `admin_token`), status, metrics.
    pub admin_addr: SocketAddr,
    /// Bearer token of the operator endpoints; `None` turns them off (404).
    pub admin_token: Option<AdminToken>,
    /// This member's CA and certificate: every listener serves mutual TLS,
    /// every peer RPC presents the certificate, and callers are authorised
    /// by identity ([`crate::authz`]). `None` is plaintext with no checks
    /// (development only: `once store --insecure-plaintext`).
    pub tls: Option<once_tls::Tls>,
    /// What the client API and admin listeners tolerate; the Raft listener
    /// gets the same with deadlines long enough for a snapshot chunk.
    pub limits: ServerLimits,
    pub data_dir: PathBuf,
    /// The founding voters, this member included. Only the lowest of them
    /// initialises a cluster, only once, and only when every founding peer
    /// says it never belonged to one (see `server::bootstrap`); a member
    /// joining later gets none.
    pub peers: BTreeMap<NodeId, String>,
    pub timing: Timing,
    /// Largest Raft RPC body (an append batch, a snapshot chunk). Default 16 MiB.
    pub max_body: usize,
    /// Snapshot chunk size; below `max_body`. Default 4 MiB.
    pub snapshot_chunk: usize,
    /// Never build a snapshot sooner than this many applied entries after
    /// the last; past it, once the log weighs half the last snapshot
    /// ([`crate::snapshot_policy`]). Default 10 000.
    pub snapshot_every: u64,
    /// Log entries kept after a snapshot, so a briefly lagging follower
    /// catches up from the log rather than a snapshot. Default 1 000.
    pub keep_logs_after_snapshot: u64,
    /// The state machine's page cache in bytes (default 256 MiB): with the
    /// log's, what bounds the member's memory however many records it holds.
    pub state_cache: usize,
    /// Group commit: most client requests in one raft entry (default 512)
    /// and most entries proposed at once (default 8).
    pub max_batch: usize,
    pub max_inflight_batches: usize,
    /// This member's region, its peers' regions, and the simulated WAN
    /// latency between regions (default: region `member-<id>`, every peer
    /// elsewhere, no latency). See [`crate::wan`].
    pub wan: WanConfig,
    /// How far this member's clock may be from a majority of the voters'
    /// and still stamp time as leader (default 500 ms; see
    /// [`crate::clock`]). Members' clocks must be kept well within it
    /// (NTP keeps them within milliseconds).
    pub max_clock_offset: Duration,
    /// Up to 32 appends in flight to a follower whose round trip is at
    /// least this long, one to a nearer one (default 5 ms: across regions,
    /// not within one; [`crate::pipeline::Pipeline::depth_for`]). `0`: 32 to
    /// every follower.
    pub pipeline_from: Duration,
    /// The newest wire version this member declares (default: this
    /// build's). Lower keeps the cluster at that version, so the build
    /// before can still be rolled back to ([`crate::wire_versions`]).
    pub wire_version: u16,
    /// What the leader does on its own ([`crate::housekeeping`]): how
    /// often it looks (default 1 s), how long a client stays idle before
    /// its dedup entries are forgotten (default 24 h), and which member it
    /// hands the lead to (default none).
    pub housekeeping: crate::housekeeping::Settings,
    /// The groups this member hosts besides the directory, one per home
    /// region, each named by its region (default none: one group). Each is
    /// served under `/groups/<name>` on the same listeners, keeps its files
    /// under `<data_dir>/groups/<name>`, and hands its lead to the region
    /// where its tenants live (docs/decisions/0063-a-raft-group-per-home-region.md).
    pub groups: Vec<String>,
    /// The region whose tenants the directory keeps: set, the directory's
    /// lead follows them as every other group's follows its own (instead
    /// of `housekeeping.preferred_leader`).
    pub directory_home: Option<String>,
}

impl StoreConfig {
    pub fn new(id: NodeId, raft_addr: SocketAddr, api_addr: SocketAddr, data_dir: PathBuf) -> Self {
        Self {
            id,
            raft_addr,
            api_addr,
            admin_addr: SocketAddr::new(api_addr.ip(), 0),
            admin_token: None,
            tls: None,
            limits: ServerLimits::default(),
            data_dir,
            peers: BTreeMap::new(),
            timing: Timing::default(),
            max_body: 16 << 20,
            snapshot_chunk: 4 << 20,
            snapshot_every: 10_000,
            keep_logs_after_snapshot: 1_000,
            state_cache: crate::state_machine::DEFAULT_STATE_CACHE,
            max_batch: 512,
            max_inflight_batches: 8,
            wan: WanConfig::alone(id),
            max_clock_offset: Duration::from_millis(500),
            pipeline_from: Duration::from_millis(5),
            wire_version: crate::wire::WIRE_VERSION,
            housekeeping: crate::housekeeping::Settings {
                every: Duration::from_secs(1),
                forget_clients_after: Some(Duration::from_secs(24 * 3600)),
                preferred_leader: None,
                follow_tenants: None,
            },
            groups: Vec::new(),
            directory_home: None,
        }
    }
}
