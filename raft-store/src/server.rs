//! One raft-store member: opens the log and state machine in its data
//! directory, starts openraft, binds its three listeners (Raft RPC, client
//! API, admin) on the edge's server — each serving mutual TLS with the
//! member's certificate unless it runs in plaintext for development — and
//! bootstraps the cluster when it is a founding member of a new one.
//!
//! A member may host several groups, one per home region
//! (docs/decisions/0063-a-raft-group-per-home-region.md): the directory at
//! the listeners' root and in the data directory, every other group under
//! `/groups/<name>` and `<data dir>/groups/<name>`, each its own openraft
//! instance with its own log, state machine, elections and bootstrap. They
//! share the listeners and the simulated WAN, as they share the region.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use once_edge::{EdgeMetrics, Server, ServerLimits};
use openraft::{Config, SnapshotPolicy};
use tokio::sync::watch;

use crate::api_service::{self, ApiState, HostedGroups};
use crate::authz::Access;
use crate::clock::ClockGuard;
use crate::config::StoreConfig;
use crate::group_commit::GroupCommit;
use crate::housekeeping::Housekeeping;
use crate::leadership::election::{ElectionMetrics, Elections};
use crate::leadership::pre_vote::Silence;
use crate::leadership::read_index::ReadIndex;
use crate::log_store::LogStore;
use crate::network::Network;
use crate::pipeline::Pipeline;
use crate::raft_service::{self, PreVotes};
use crate::snapshot_policy;
use crate::state_machine::StateMachine;
use crate::tasks::{GroupTasks, Lifetime};
use crate::types::{NodeId, Raft};
use crate::wan::SimulatedWan;
use crate::wire_versions::WireVersions;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid raft configuration: {0}")]
    Config(String),
    #[error("opening the data directory {path}")]
    DataDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("opening the log")]
    Log(#[source] redb::DatabaseError),
    #[error("opening the state machine")]
    StateMachine(#[source] redb::Error),
    #[error("binding {what} on {addr}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("building the peer client")]
    Client(#[source] reqwest::Error),
    #[error("starting raft")]
    Raft(#[source] openraft::error::Fatal<NodeId>),
}

/// The member's Raft core ended while the member was serving.
#[derive(Debug, thiserror::Error)]
#[error("member {id}: the Raft core stopped (see the log for openraft's fatal error or panic)")]
pub struct CoreStopped {
    pub id: NodeId,
}

/// A running member. Its servers run on spawned tasks; `shutdown` stops raft.
pub struct StoreServer {
    pub id: NodeId,
    pub raft: Raft,
    pub state_machine: StateMachine,
    pub raft_addr: SocketAddr,
    pub api_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// The simulated WAN of this member (to isolate it in-process): every
    /// group it hosts shares it, as they share the region.
    pub wan: Arc<SimulatedWan>,
    /// The other groups this member hosts, by name
    /// (docs/decisions/0063-a-raft-group-per-home-region.md); the fields
    /// above are the directory's.
    pub groups: BTreeMap<String, HostedGroup>,
    /// The directory's background tasks (each hosted group has its own).
    pub tasks: Arc<GroupTasks>,
    /// Stops the three listeners.
    stop: watch::Sender<bool>,
}

/// One group besides the directory that a member hosts: served under
/// [`crate::protocol::group_path`] on the member's listeners, its files under
/// [`group_data_dir`].
#[derive(Clone)]
pub struct HostedGroup {
    pub raft: Raft,
    pub state_machine: StateMachine,
    pub tasks: Arc<GroupTasks>,
}

impl std::fmt::Debug for HostedGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostedGroup").finish_non_exhaustive()
    }
}

/// Where group `name`'s log and state machine live under a member's data
/// directory.
pub fn group_data_dir(data_dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    data_dir.join("groups").join(name)
}

/// The routers and parts of one started group.
struct StartedGroup {
    raft: Raft,
    state_machine: StateMachine,
    tasks: Arc<GroupTasks>,
    raft_router: axum::Router,
    api_router: axum::Router,
    admin_router: axum::Router,
}

/// What a member's groups share: the region's links and the listeners'
/// identities and metrics.
struct Shared {
    wan: Arc<SimulatedWan>,
    edge: EdgeMetrics,
    access: Access,
    raft_addr: SocketAddr,
    api_addr: SocketAddr,
    /// The process's clock, which every group's guard reads.
    clock: ClockGuard,
    /// Every group's state, for the member's `/metrics`.
    hosted: HostedGroups,
}

impl std::fmt::Debug for StoreServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreServer")
            .field("id", &self.id)
            .field("raft_addr", &self.raft_addr)
            .field("api_addr", &self.api_addr)
            .field("admin_addr", &self.admin_addr)
            .field("groups", &self.groups.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl StoreServer {
    pub async fn start(config: StoreConfig) -> Result<Self, StartError> {
        let raft_config = Arc::new(raft_config(&config)?);
        let edge = EdgeMetrics::default();
        let access = if config.tls.is_some() {
            Access::Verified
        } else {
            Access::Open
        };
        let t = &config.timing;
        // A snapshot chunk may take its whole timeout to arrive and apply.
        let raft_limits = ServerLimits {
            body_read_timeout: config
                .limits
                .body_read_timeout
                .max(t.snapshot_chunk_timeout),
            request_deadline: config
                .limits
                .request_deadline
                .max(t.snapshot_chunk_timeout + std::time::Duration::from_secs(5)),
            ..config.limits
        };
        // The Raft and client API listeners require a client certificate;
        // the admin listener lets a client without one finish the
        // handshake for `/healthz` and `/readyz` only (a kubelet's probes
        // present none) and refuses it everything else (`authz`).
        let bind = |what, addr, limits, anonymous: bool| {
            let tls = config.tls.as_ref().map(|tls| {
                if anonymous {
                    tls.server_config_anonymous_allowed()
                } else {
                    tls.server_config()
                }
            });
            let edge = edge.clone();
            async move {
                let server = bind(what, addr, limits, &edge).await?;
                Ok::<_, StartError>(match tls {
                    Some(tls) => server.with_tls(tls),
                    None => server,
                })
            }
        };
        let raft_server = bind("raft", config.raft_addr, raft_limits, false).await?;
        let api_server = bind("api", config.api_addr, config.limits, false).await?;
        let admin_server = bind("admin", config.admin_addr, config.limits, true).await?;
        let shared = Shared {
            wan: Arc::new(SimulatedWan::new(config.wan.clone())),
            edge,
            access,
            raft_addr: raft_server.local_addr(),
            api_addr: api_server.local_addr(),
            clock: ClockGuard::new(config.id, config.max_clock_offset, t.heartbeat),
            hosted: HostedGroups::default(),
        };
        let admin_addr = admin_server.local_addr();

        let directory = start_group(&config, None, &raft_config, &shared).await?;
        let (mut raft_router, mut api_router, mut admin_router) = (
            directory.raft_router,
            directory.api_router,
            directory.admin_router,
        );
        let mut groups = BTreeMap::new();
        for name in &config.groups {
            let group = start_group(&config, Some(name), &raft_config, &shared).await?;
            let prefix = crate::protocol::group_path(name);
            raft_router = raft_router.nest(&prefix, group.raft_router);
            api_router = api_router.nest(&prefix, group.api_router);
            admin_router = admin_router.nest(&prefix, group.admin_router);
            groups.insert(
                name.clone(),
                HostedGroup {
                    raft: group.raft,
                    state_machine: group.state_machine,
                    tasks: group.tasks,
                },
            );
        }

        let (stop, stopping) = watch::channel(false);
        // Only an explicit stop ends them: a test that drops its handle
        // keeps the member serving, as a process would.
        let stopped = |mut stopping: watch::Receiver<bool>| async move {
            if stopping.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let drain = std::time::Duration::from_secs(5);
        tokio::spawn(raft_server.serve(raft_router, stopped(stopping.clone()), drain));
        tokio::spawn(api_server.serve(api_router, stopped(stopping.clone()), drain));
        tokio::spawn(admin_server.serve(admin_router, stopped(stopping), drain));
        Ok(Self {
            id: config.id,
            raft: directory.raft,
            state_machine: directory.state_machine,
            raft_addr: shared.raft_addr,
            api_addr: shared.api_addr,
            admin_addr,
            wan: shared.wan,
            groups,
            tasks: directory.tasks,
            stop,
        })
    }

    /// Runs until `signal`, then stops every group's background tasks, raft
    /// and the listeners. If the Raft
    /// core of any group stops first (a fatal storage error, a panic in
    /// openraft), the listeners stop too and the error says so: a member
    /// whose core is gone must not keep answering status from its last
    /// metrics (it would go on saying it leads), so the process exits and
    /// its supervisor restarts it from its disk.
    pub async fn run_until(self, signal: impl Future<Output = ()>) -> Result<(), CoreStopped> {
        let rafts: Vec<Raft> = std::iter::once(self.raft.clone())
            .chain(self.groups.values().map(|g| g.raft.clone()))
            .collect();
        let tasks: Vec<Arc<GroupTasks>> = std::iter::once(self.tasks.clone())
            .chain(self.groups.values().map(|g| g.tasks.clone()))
            .collect();
        let stop_tasks = || async {
            for group in &tasks {
                group.stop().await;
            }
        };
        let (core_stopped, mut any_core_stopped) = tokio::sync::mpsc::channel::<()>(1);
        for raft in &rafts {
            let mut metrics = raft.metrics();
            let core_stopped = core_stopped.clone();
            tokio::spawn(async move {
                // The core owns the sending half: it is dropped when the core ends.
                while metrics.changed().await.is_ok() {}
                let _ = core_stopped.send(()).await;
            });
        }
        tokio::select! {
            () = signal => {
                // Before the cores, so no loop reads a core that is going.
                stop_tasks().await;
                for raft in rafts {
                    let _ = raft.shutdown().await;
                }
                let _ = self.stop.send(true);
                Ok(())
            }
            Some(()) = any_core_stopped.recv() => {
                tracing::error!(id = self.id, "a Raft core stopped; stopping this member");
                stop_tasks().await;
                let _ = self.stop.send(true);
                Err(CoreStopped { id: self.id })
            }
        }
    }
}

/// The founding peer that should lead a new group first: the configured
/// preferred member, or the member of the group's home region.
fn first_leader(
    config: &StoreConfig,
    settings: &crate::housekeeping::Settings,
    wan: &SimulatedWan,
) -> Option<NodeId> {
    match &settings.follow_tenants {
        None => settings.preferred_leader,
        Some(follow) => wan.member_in(&follow.home, config.id, config.peers.keys().copied()),
    }
}

/// openraft's configuration, the same for every group a member hosts.
fn raft_config(config: &StoreConfig) -> Result<Config, StartError> {
    let t = &config.timing;
    Config {
        cluster_name: "once-raft-store".into(),
        heartbeat_interval: t.heartbeat.as_millis() as u64,
        election_timeout_min: t.election_min.as_millis() as u64,
        election_timeout_max: t.election_max.as_millis() as u64,
        install_snapshot_timeout: t.snapshot_chunk_timeout.as_millis() as u64,
        snapshot_max_chunk_size: config.snapshot_chunk as u64,
        // Ours instead: by the log's weight (`crate::snapshot_policy`).
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: config.keep_logs_after_snapshot,
        max_payload_entries: 300,
        // Ours instead: with a pre-vote (`crate::leadership::election`).
        enable_elect: false,
        ..Default::default()
    }
    .validate()
    .map_err(|e| StartError::Config(e.to_string()))
}

/// Opens and starts one group on this member: the directory (`group`
/// `None`: the data directory itself, no path prefix) or the group named
/// `group` ([`group_data_dir`], [`crate::protocol::group_path`]), bootstrapping it with
/// the founding peers' addresses under the same prefix. Its routers are
/// returned for the member's listeners to serve.
async fn start_group(
    config: &StoreConfig,
    group: Option<&str>,
    raft_config: &Arc<Config>,
    shared: &Shared,
) -> Result<StartedGroup, StartError> {
    let t = &config.timing;
    // What its Raft RPCs name it ([`crate::link::GROUP_HEADER`]).
    let name = group.unwrap_or(once_store_client::groups::DIRECTORY);
    let (data_dir, prefix) = match group {
        None => (config.data_dir.clone(), String::new()),
        Some(name) => (
            group_data_dir(&config.data_dir, name),
            crate::protocol::group_path(name),
        ),
    };
    std::fs::create_dir_all(&data_dir).map_err(|source| StartError::DataDir {
        path: data_dir.display().to_string(),
        source,
    })?;
    let log = LogStore::open(&data_dir.join("log.redb")).map_err(StartError::Log)?;
    let state_machine =
        StateMachine::open_with_cache(&data_dir.join("state.redb"), config.state_cache)
            .map_err(StartError::StateMachine)?;

    let tasks = Arc::new(GroupTasks::new(name));
    let wan = shared.wan.clone();
    let clock = Arc::new(
        ClockGuard::new(config.id, config.max_clock_offset, t.heartbeat)
            .sharing_clock_with(&shared.clock),
    );
    let versions = Arc::new(WireVersions::new(config.id, config.wire_version));
    let pipeline = Pipeline::new(log.appends(), config.pipeline_from);
    let network = Network::new(
        config.id,
        Some(shared.raft_addr.ip()),
        t.connect_timeout,
        config.max_body,
        config.tls.as_ref(),
    )
    .map_err(StartError::Client)?
    .with_wan(wan.clone())
    .with_clock(clock.clone())
    .with_versions(versions.clone())
    .with_pipeline(pipeline.clone())
    .with_append_budget(t.election_max)
    .with_group(name);
    let campaigns = network.clone();
    let electing = network.clone();
    let reading = network.clone();
    let raft = Raft::new(
        config.id,
        raft_config.clone(),
        network,
        log.clone(),
        state_machine.clone(),
    )
    .await
    .map_err(StartError::Raft)?;

    let group_commit = GroupCommit::start(
        &tasks,
        raft.clone(),
        clock.clone(),
        config.max_batch,
        config.max_inflight_batches,
        crate::group_commit::Hold {
            upto: t.election_max,
            silent_after: 2 * t.heartbeat,
        },
    );
    // A home region's group: its lead goes where its tenants live.
    let settings = match group.or(config.directory_home.as_deref()) {
        None => config.housekeeping.clone(),
        Some(home) => crate::housekeeping::Settings {
            preferred_leader: None,
            follow_tenants: Some(crate::leadership::succession::FollowTenants {
                home: home.to_owned(),
                wan: wan.clone(),
            }),
            ..config.housekeeping.clone()
        },
    };
    let founder = first_leader(config, &settings, &wan);
    let succession =
        settings
            .follow_tenants
            .clone()
            .map(|follow| crate::leadership::succession::Succession {
                state_machine: state_machine.clone(),
                follow,
            });
    Housekeeping {
        raft: raft.clone(),
        state_machine: state_machine.clone(),
        group_commit: group_commit.clone(),
        versions: versions.clone(),
        clock: clock.clone(),
        network: campaigns,
        settings,
        regions: config.wan.cluster_regions(),
    }
    .start(&tasks);
    let silence = Arc::new(Silence::default());
    let elections = ElectionMetrics::default();
    Elections {
        raft: raft.clone(),
        log: log.clone(),
        network: electing,
        clock: clock.clone(),
        silence: silence.clone(),
        metrics: elections.clone(),
        heartbeat: t.heartbeat,
        election_min: t.election_min,
        election_max: t.election_max,
        succession,
    }
    .start(&tasks);
    let prevotes = PreVotes {
        log: log.clone(),
        silence,
    };
    snapshot_policy::start(
        &tasks,
        raft.clone(),
        state_machine.clone(),
        log,
        config.snapshot_every,
    );
    let api = Arc::new(ApiState {
        group: group.map(str::to_owned),
        hosted: shared.hosted.clone(),
        id: config.id,
        raft: raft.clone(),
        state_machine: state_machine.clone(),
        group_commit,
        versions: versions.clone(),
        read_index: ReadIndex::start(&tasks, raft.clone(), reading),
        raft_addr: format!("{}{prefix}", shared.raft_addr),
        api_addr: format!("{}{prefix}", shared.api_addr),
        wan: wan.clone(),
        clock: clock.clone(),
        admin_token: config.admin_token.clone().map(Arc::new),
        edge: shared.edge.clone(),
        pipeline: pipeline.metrics(),
        elections,
        access: shared.access,
        tasks: tasks.clone(),
        regions: config.wan.cluster_regions(),
    });
    shared.hosted.add(&api);
    tasks.spawn(
        "clock checks",
        Lifetime::Group,
        clock.clone().run(raft.clone(), t.heartbeat),
    );
    let raft_router = raft_service::router(
        raft.clone(),
        name,
        config.max_body,
        wan.clone(),
        clock,
        versions,
        shared.access,
        prevotes,
    );
    let api_router = api_service::client_router(api.clone());
    let admin_router = api_service::admin_router(api);

    let peers = config
        .peers
        .iter()
        .map(|(id, addr)| (*id, format!("{addr}{prefix}")))
        .collect();
    crate::bootstrap::bootstrap(
        &tasks,
        raft.clone(),
        config.id,
        peers,
        shared.raft_addr.ip(),
        wan.region().to_owned(),
        config.tls.clone(),
        founder,
    );
    Ok(StartedGroup {
        raft,
        state_machine,
        tasks,
        raft_router,
        api_router,
        admin_router,
    })
}

async fn bind(
    what: &'static str,
    addr: SocketAddr,
    limits: ServerLimits,
    edge: &EdgeMetrics,
) -> Result<Server, StartError> {
    Server::bind(what, addr, limits, edge.clone())
        .await
        .map_err(|source| StartError::Bind { what, addr, source })
}
