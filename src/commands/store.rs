//! `once store`: run a raft-store member, or administer a running cluster
//! (`status`, `add-learner`, `change-membership`, `snapshot`, `bench`,
//! `place`, `partition`). `--region`, `--peer-regions` and `--wan-latency` place the
//! member in a simulated WAN (see `once_raft_store::wan`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use once_raft_store::config::{StoreConfig, Timing};
use once_raft_store::server::StoreServer;
use once_raft_store::wan::{self, WanConfig};

use super::config_error;

mod bench;
mod operate;
mod place;
mod status;

const WAN_HELP: &str = "\
Simulated WAN (latency and partition drills on one machine):
  Every member has a region (--region, default member-<id>; peers' regions with
  --peer-regions, a peer not listed is elsewhere). Each Raft RPC to a member of
  another region waits --wan-latency MS before it is sent. POST /admin/partition
  {\"isolated\": true} on a member's API (or `once store partition --endpoint E
  --isolated true`) cuts its region off: no Raft RPC to or from other regions,
  and clients declaring another region (X-Once-Client-Region) are refused.
  {\"cut_regions\": [\"eu-west\"]} (or `--cut-regions eu-west`; empty heals) is the
  same seen from another member: no Raft RPC to or from eu-west's members, and
  clients declaring eu-west are refused. {\"refuse_from\": [\"eu-west\"]} (or
  `--refuse-from eu-west`) is a one-way cut: eu-west's Raft RPC and clients are
  refused, but this member still sends to eu-west.

Secrets:
  ONCE_ADMIN_TOKEN (environment only): the bearer token of the operator endpoints on the
  admin listener (membership, elections, snapshots, record dumps, the partition switch);
  at least 16 characters and not guessable (64 bits or more by its own characters'
  entropy), or the process exits with code 64. Unset: those endpoints are off (404). Never
  passed as a flag: a command line shows in `ps`. The store operator's own token: not the
  nodes' nor the routers'.

Mutual TLS:
  A member serves all three listeners with mutual TLS and authorises every caller by the
  identity in its client certificate: only store members speak Raft, nodes and routers use
  their role's client API operations, and membership, elections, snapshots, partitions and
  record dumps need an operator certificate (and the admin token). --tls-ca, --tls-cert and
  --tls-key (or ONCE_TLS_CA, ONCE_TLS_CERT, ONCE_TLS_KEY) are required, except with
  --insecure-plaintext (development only: no TLS, nobody checked). The admin commands
  (status, add-learner, ...) take the same flags with an operator certificate.";

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, after_help = WAN_HELP)]
pub struct StoreArgs {
    #[command(subcommand)]
    admin: Option<operate::AdminCommand>,
    #[command(flatten)]
    member: MemberArgs,
    /// The member's certificate (a store identity), or the operator's for
    /// the admin commands.
    #[command(flatten)]
    tls: super::tls::TlsArgs,
}

#[derive(Debug, Args)]
struct MemberArgs {
    /// This member's id (one voter per region).
    #[arg(long, env = "ONCE_STORE_ID")]
    id: Option<u64>,
    /// Raft RPC listener; port 0 picks one (printed on stdout).
    #[arg(long, env = "ONCE_STORE_RAFT_ADDR", default_value = "127.0.0.1:7001")]
    raft_addr: SocketAddr,
    /// Client API listener.
    #[arg(long, env = "ONCE_STORE_API_ADDR", default_value = "127.0.0.1:7101")]
    api_addr: SocketAddr,
    /// The admin listener: membership, elections, snapshots, record dumps
    /// and the partition switch (admin token from `ONCE_ADMIN_TOKEN`),
    /// status, `/metrics`, health and readiness.
    #[arg(long, env = "ONCE_ADMIN_LISTEN", default_value = "127.0.0.1:7201")]
    admin_listen: SocketAddr,
    #[command(flatten)]
    edge: super::edge::EdgeArgs,
    #[arg(long, env = "ONCE_STORE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Founding voters `1=host:port,2=…` (raft addresses, this member
    /// included). Omit on a member that joins an existing cluster.
    #[arg(long, env = "ONCE_STORE_PEERS", value_delimiter = ',')]
    peers: Vec<String>,
    /// Defaults suit members ~100 ms apart; see raft-store's `Timing`.
    /// Also the time one append RPC may take.
    #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
    heartbeat: Duration,
    /// A member campaigns after election-max + [0, election-max -
    /// election-min] of silence, once a majority granted its pre-vote: a
    /// dead leader is replaced 0.9–1.2 s after its last heartbeat with the
    /// defaults, plus a round trip.
    #[arg(long, default_value = "600ms", value_parser = humantime::parse_duration)]
    election_min: Duration,
    /// Also the leader's lease: a member that heard a leader votes for no
    /// other until this has passed.
    #[arg(long, default_value = "900ms", value_parser = humantime::parse_duration)]
    election_max: Duration,
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    snapshot_chunk_timeout: Duration,
    /// How far this member's clock may be from a majority of the voters'
    /// and still stamp time as leader; keep clocks NTP-synchronised well
    /// within it. A member further off stamps nothing, steps down and does
    /// not campaign.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    max_clock_offset: Duration,
    /// Send a follower up to 32 appends at once (pipelined replication)
    /// when its round trip is at least this long: across regions, where
    /// waiting for the append in flight costs a round trip. A nearer
    /// follower gets one at a time, sent while the leader fsyncs when
    /// nothing else is on its way; under load the leader batches behind it,
    /// which costs less. "0s": 32 to every follower.
    #[arg(long, env = "ONCE_STORE_PIPELINE_FROM_RTT", default_value = "5ms", value_parser = humantime::parse_duration)]
    pipeline_from_rtt: Duration,
    /// Never build a snapshot sooner than this many applied entries after
    /// the last; past it, once the log since weighs half the last snapshot
    /// (or at 100 times this many entries).
    #[arg(long, default_value_t = 10_000)]
    snapshot_every: u64,
    #[arg(long, default_value_t = 1_000)]
    keep_logs_after_snapshot: u64,
    /// The state machine's page cache, in MiB: with the log's, what bounds
    /// this member's memory however many records it holds.
    #[arg(long, default_value_t = 256)]
    state_cache_mib: usize,
    /// The newest wire version this member declares [default: this
    /// build's]. The cluster moves to a new version only once every member
    /// declares it; pin one member to the version before while a roll may
    /// still be undone, so the build before can rejoin.
    #[arg(long, env = "ONCE_STORE_WIRE_VERSION", value_parser = clap::value_parser!(u16).range(1..=i64::from(once_raft_store::wire::WIRE_VERSION)))]
    wire_version: Option<u16>,
    /// Forget a client's dedup entries once it has sent nothing for this
    /// long ("off": never). Far above the longest a client retries one
    /// command (seconds); clients that restart take a new id.
    #[arg(
        long,
        env = "ONCE_STORE_FORGET_CLIENTS_AFTER",
        default_value = "24h",
        value_parser = parse_idle_limit
    )]
    forget_clients_after: IdleLimit,
    /// The member that should lead whenever it can: the one in the region
    /// most traffic comes from. After an election puts the lead elsewhere,
    /// the leader hands it back once this member holds every entry.
    #[arg(long, env = "ONCE_STORE_PREFERRED_LEADER", value_name = "ID")]
    preferred_leader: Option<u64>,
    /// The groups this member hosts besides the directory, one per home
    /// region other than the directory's, each named by its region
    /// (`us-east,ap-south`); every member of a deployment hosts the same.
    /// Each is served under /groups/<name> on the same listeners, keeps its
    /// files under <data-dir>/groups/<name>, and hands its lead to the
    /// region its tenants live in (docs/decisions/0063).
    #[arg(long, env = "ONCE_STORE_GROUPS", value_delimiter = ',', value_parser = parse_group_name)]
    groups: Vec<String>,
    /// The region whose tenants the directory (the first group) keeps:
    /// its lead then follows them, to the region most of them live in
    /// now, instead of --preferred-leader's fixed member.
    #[arg(
        long,
        env = "ONCE_STORE_DIRECTORY_HOME",
        conflicts_with = "preferred_leader"
    )]
    directory_home: Option<String>,
    /// This member's region label [default: its --peer-regions entry, else
    /// member-<id>]. Simulated WAN latency and partitions apply between
    /// members of different regions.
    #[arg(long, env = "ONCE_STORE_REGION")]
    region: Option<String>,
    /// Peers' regions `1=eu-west,2=us-east,3=ap-south`; a peer not listed
    /// is in a region of its own (so by default every peer is remote).
    #[arg(long, env = "ONCE_STORE_PEER_REGIONS", value_delimiter = ',')]
    peer_regions: Vec<String>,
    /// Simulated WAN: every Raft RPC to a member of another region waits
    /// this many milliseconds before it is sent (one round trip per RPC).
    /// For latency drills on one machine; 0 in production.
    #[arg(
        long,
        env = "ONCE_STORE_WAN_LATENCY",
        value_name = "MS",
        default_value_t = 0
    )]
    wan_latency: u64,
    /// Parse and validate everything, print the effective configuration and
    /// exit without binding, opening the data directory or contacting peers.
    #[arg(long)]
    check_config: bool,
    /// Development only: serve plaintext and check nobody (anyone who can
    /// reach a listener can change membership, placements and records).
    /// Without it, --tls-ca, --tls-cert and --tls-key are required.
    #[arg(long)]
    insecure_plaintext: bool,
}

pub async fn run(args: StoreArgs) -> anyhow::Result<()> {
    match args.admin {
        Some(command) => operate::run(command, &args.tls).await,
        None => run_member(args.member, &args.tls).await,
    }
}

async fn run_member(args: MemberArgs, tls: &super::tls::TlsArgs) -> anyhow::Result<()> {
    let id = args
        .id
        .ok_or_else(|| config_error(anyhow::anyhow!("--id is required")))?;
    let data_dir = args
        .data_dir
        .ok_or_else(|| config_error(anyhow::anyhow!("--data-dir is required")))?;
    let mut peers = BTreeMap::new();
    for peer in &args.peers {
        let (pid, addr) = peer
            .split_once('=')
            .ok_or_else(|| config_error(anyhow::anyhow!("peer {peer:?} is not ID=ADDR")))?;
        let pid: u64 = pid
            .parse()
            .map_err(|e| config_error(anyhow::anyhow!("peer id {pid:?}: {e}")))?;
        peers.insert(pid, addr.to_owned());
    }
    if !peers.is_empty() && !peers.contains_key(&id) {
        return Err(config_error(anyhow::anyhow!(
            "--peers must include this member (id {id})"
        )));
    }
    let peer_regions = wan::parse_peer_regions(&args.peer_regions)
        .map_err(|e| config_error(anyhow::anyhow!("--peer-regions: {e}")))?;
    let region = wan::own_region(id, args.region.as_deref(), &peer_regions)
        .map_err(|e| config_error(anyhow::anyhow!(e)))?;
    let mut config = StoreConfig::new(id, args.raft_addr, args.api_addr, data_dir);
    config.admin_addr = args.admin_listen;
    config.admin_token = super::edge::admin_token().map_err(config_error)?;
    config.tls = tls.load(&[once_tls::Role::StoreMember])?;
    // A member dials only its peers, by `host:port`: TLS with a certificate.
    super::plaintext::check_links(
        "store",
        config.tls.is_some(),
        args.insecure_plaintext,
        args.peers.iter().map(|p| ("--peers", p.as_str())),
    )
    .map_err(config_error)?;
    config.limits = args.edge.limits().map_err(config_error)?;
    config.peers = peers;
    config.wan = WanConfig {
        region,
        peer_regions,
        latency: Duration::from_millis(args.wan_latency),
    };
    config.timing = Timing {
        heartbeat: args.heartbeat,
        election_min: args.election_min,
        election_max: args.election_max,
        snapshot_chunk_timeout: args.snapshot_chunk_timeout,
        ..Timing::default()
    };
    config.snapshot_every = args.snapshot_every;
    config.max_clock_offset = args.max_clock_offset;
    config.pipeline_from = args.pipeline_from_rtt;
    config.keep_logs_after_snapshot = args.keep_logs_after_snapshot;
    config.state_cache = args.state_cache_mib << 20;
    if let Some(version) = args.wire_version {
        config.wire_version = version;
    }
    config.housekeeping.forget_clients_after = args.forget_clients_after.0;
    config.housekeeping.preferred_leader = args.preferred_leader;
    config.groups = args.groups.clone();
    config.directory_home = args.directory_home.clone();
    if let Some(twice) = config
        .groups
        .iter()
        .enumerate()
        .find(|(i, g)| config.groups[..*i].contains(g))
    {
        return Err(config_error(anyhow::anyhow!(
            "--groups names {} twice",
            twice.1
        )));
    }
    let timing = &config.timing;
    if !(timing.heartbeat < timing.election_min && timing.election_min < timing.election_max) {
        return Err(config_error(anyhow::anyhow!(
            "timeouts must satisfy heartbeat < election-min < election-max"
        )));
    }
    if args.check_config {
        println!(
            "{}",
            serde_json::json!({
                "role": "store",
                "id": id,
                "raftAddr": args.raft_addr.to_string(),
                "apiAddr": args.api_addr.to_string(),
                "adminListen": args.admin_listen.to_string(),
                "adminEndpoints": config.admin_token.is_some(),
                "tls": config.tls.as_ref().and_then(|t| t.identity()).map(|i| i.uri()),
                "limits": super::edge::describe(&config.limits),
                "dataDir": config.data_dir.display().to_string(),
                "peers": config.peers,
                "heartbeat": humantime::format_duration(timing.heartbeat).to_string(),
                "electionTimeout": format!(
                    "{}..{}",
                    humantime::format_duration(timing.election_min),
                    humantime::format_duration(timing.election_max)
                ),
                "snapshotEvery": args.snapshot_every,
                "maxClockOffset": humantime::format_duration(args.max_clock_offset).to_string(),
                "pipelineFromRtt": humantime::format_duration(args.pipeline_from_rtt).to_string(),
                "region": config.wan.region,
                "peerRegions": config.wan.peer_regions,
                "wanLatencyMs": args.wan_latency,
                "wireVersion": config.wire_version,
                "preferredLeader": args.preferred_leader,
                "groups": config.groups,
                "directoryHome": config.directory_home,
                "forgetClientsAfter": config.housekeeping.forget_clients_after.map(|d| humantime::format_duration(d).to_string()),
            })
        );
        return Ok(());
    }
    let server = StoreServer::start(config)
        .await
        .context("starting the raft-store member")?;
    println!(
        "listening raft={} api={} admin={}",
        server.raft_addr, server.api_addr, server.admin_addr
    );
    server.run_until(once_edge::shutdown_signal()).await?;
    Ok(())
}

/// A group's name is a region's, and a path segment and a directory name:
/// letters, digits and `-` only.
fn parse_group_name(name: &str) -> Result<String, String> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if valid {
        Ok(name.to_owned())
    } else {
        Err(format!(
            "{name:?} is not a group name: 1-63 letters, digits or '-' (a region's name)"
        ))
    }
}

/// `--forget-clients-after`: a duration, or `off` for never.
#[derive(Debug, Clone, Copy)]
struct IdleLimit(Option<Duration>);

fn parse_idle_limit(s: &str) -> Result<IdleLimit, humantime::DurationError> {
    match s {
        "off" => Ok(IdleLimit(None)),
        s => humantime::parse_duration(s).map(|d| IdleLimit(Some(d))),
    }
}
