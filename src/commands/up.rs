//! `once up`: the whole system on this machine, embedded storage only,
//! nothing to install. For `--regions N` (default 3) it runs, as child
//! processes of itself: one raft-store member, one node and one SQLite
//! database per region, and a router in front; the provider simulator runs
//! inside this process and is reached over HTTP. It bootstraps the store,
//! places demo tenants (at least one homed in each region), writes
//! `DIR/cluster.json` and prints how to use it. Ctrl-C or SIGTERM stops
//! every child cleanly; a second `once up --dir DIR` resumes from the same
//! data, ports and keys.
//!
//! `--wan-latency MS` adds that round trip to every link that crosses
//! regions (Raft RPC, node → store member, router → node), inside the
//! project's own transports, so a laptop behaves like three regions.
//!
//! Drills steer the processes through `once up`'s control endpoint
//! (`cluster.json` → `control.url`, see `control`): restart a killed
//! region, or restart one process — gracefully, as a crash, with its wall
//! clock skewed, or a store member with its data wiped. It admits only
//! requests with the control token (`cluster.json` → `control.token`) and a
//! JSON body, sent to its own loopback address ([`perimeter`]).
//!
//! `DIR` is 0700 and every file in it 0600, whatever the umask
//! ([`private_dir`]).
//!
//! Every internal link is mutual TLS ([`pki`]): `once up` makes a local CA
//! and a certificate per process in `DIR/tls/` on the first start, reuses
//! them on resume, and starts every child with `--tls-*`. Leaves live
//! `--cert-lifetime` (90 days) and are issued again `--cert-renew-before`
//! (30 days) ahead of their expiry while the cluster runs; every process
//! reloads them.

mod children;
mod control;
mod layout;
mod perimeter;
mod pki;
mod private_dir;
mod restart;
mod shutdown;
mod skew;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use once_store_client::client::ClientOptions;
use once_store_client::command::Reply;
use once_store_client::groups::StoreGroups;
use serde_json::json;

use self::children::ChildProcess;
use self::layout::{Layout, RegionLayout};
use self::pki::Pki;
use self::shutdown::Shutdown;
use super::keys::generate_key;

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Where data, keys, logs and cluster.json live.
    #[arg(long, default_value = "once-data")]
    pub dir: PathBuf,
    /// Address of the router (the API clients use).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// How many regions to run.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=7))]
    pub regions: u8,
    /// Simulated round trip, in milliseconds, on every link between regions.
    /// The store members' heartbeat and election timeouts scale with it
    /// (a heartbeat of at least one and a half round trips).
    #[arg(long, default_value_t = 0)]
    pub wan_latency: u64,
    /// How long every certificate `once up` issues its processes lives
    /// (its CA: five years).
    #[arg(long, default_value = "90d", value_parser = humantime::parse_duration)]
    pub cert_lifetime: Duration,
    /// Issue a certificate again this long before it expires; every process
    /// reloads its files, nothing restarts.
    #[arg(long, default_value = "30d", value_parser = humantime::parse_duration)]
    pub cert_renew_before: Duration,
}

/// Demo tenants; tenant i is homed in region i mod N.
const DEMO_TENANTS: &[&str] = &["acme", "globex", "initech"];

/// The provider simulator's ledger journal in DIR.
const PROVIDER_LEDGER: &str = "provider-ledger.jsonl";

/// How long a child may take to answer after it starts.
const START_LIMIT: Duration = Duration::from_secs(60);
/// How long a child may take to exit after SIGTERM (a node drains).
const STOP_GRACE: Duration = Duration::from_secs(15);

/// Raft timings of `once up`'s store members: heartbeat, election min and
/// max. A member campaigns after `election-max` (the leader's lease: no
/// voter grants a vote sooner) plus a random `0..(election-max -
/// election-min)` of silence, once a majority answered its pre-vote
/// (decision 0061). On one machine, 100 ms / 250–400 ms: a SIGKILLed leader
/// is replaced 400–550 ms after its last heartbeat, beside the router's
/// detection, so a region killed with the store leader is served elsewhere
/// within a second. Before the pre-vote, timings this short failed the api
/// tests on a starved machine (decision 0057). Across a simulated WAN a
/// heartbeat is two round trips — openraft gives an append its heartbeat
/// as its whole time, so a round trip less leaves one round trip for
/// the connection and the work at both ends — and the lease six: 100 ms /
/// 250–400 ms up to a 50 ms round trip, 140 ms / 350–420 ms at 70
/// (decisions 0064, 0066).
fn store_timing(wan_latency_ms: u64) -> [String; 6] {
    let heartbeat = (wan_latency_ms * 2).max(100);
    let lease = (wan_latency_ms * 6).max(400);
    [
        "--heartbeat".into(),
        format!("{heartbeat}ms"),
        "--election-min".into(),
        format!("{}ms", heartbeat * 5 / 2),
        "--election-max".into(),
        format!("{lease}ms"),
    ]
}

/// Writes `contents` to `path` readable by its owner only (mode 0600): the
/// files `once up` keeps hold every API key or an admin token. A file left
/// looser by an older `once up` is tightened before anything is written.
pub(crate) fn write_private(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    // `mode` only applies to a file this call creates.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("restricting {}", path.display()))?;
    file.write_all(contents)
        .with_context(|| format!("writing {}", path.display()))
}

/// Demo keys are made once and kept in `DIR/demo-keys.txt` (plaintext, for
/// development only; production uses hashed key files).
fn demo_keys(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let path = dir.join("demo-keys.txt");
    let mut keys: Vec<(String, String)> = std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(t, k)| (t.to_owned(), k.to_owned()))
        .collect();
    let missing: Vec<&str> = DEMO_TENANTS
        .iter()
        .copied()
        .filter(|t| !keys.iter().any(|(have, _)| have == t))
        .collect();
    if missing.is_empty() {
        return Ok(keys);
    }
    keys.extend(missing.iter().map(|t| ((*t).to_owned(), generate_key())));
    let text: String = keys.iter().map(|(t, k)| format!("{t}:{k}\n")).collect();
    write_private(&path, text.as_bytes())?;
    Ok(keys)
}

/// The admin tokens, one per role and power, so a leaked one opens only
/// its own: the nodes' admin endpoints (resolving a record as charged),
/// the router's (failovers, the console) and the store members' operator
/// endpoints (membership, record dumps, partitions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AdminTokens {
    pub node: String,
    pub router: String,
    pub store: String,
}

impl AdminTokens {
    /// Each made once and kept in `DIR/<name>-token` (mode 0600); the one
    /// `admin-token` an older `once up` shared between all three is
    /// deleted.
    fn load_or_create(dir: &Path) -> anyhow::Result<Self> {
        let tokens = Self {
            node: demo_admin_token(dir, "node-admin", "nadm")?,
            router: demo_admin_token(dir, "router-admin", "radm")?,
            store: demo_admin_token(dir, "store-operator", "sop")?,
        };
        match std::fs::remove_file(dir.join("admin-token")) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).context("deleting the shared admin-token of an older once up");
            }
            _ => {}
        }
        Ok(tokens)
    }

    /// `cluster.json`'s `admin_tokens`.
    fn describe(&self) -> serde_json::Value {
        json!({ "node": self.node, "router": self.router, "store": self.store })
    }
}

/// One admin token, made once and kept in `DIR/<name>-token` (mode 0600),
/// `<prefix>_` in front so an operator can tell which it is.
fn demo_admin_token(dir: &Path, name: &str, prefix: &str) -> anyhow::Result<String> {
    let path = dir.join(format!("{name}-token"));
    if let Ok(token) = std::fs::read_to_string(&path)
        && once_edge::AdminToken::new(token.trim()).is_ok()
    {
        // Written the same again: a token an older `once up` left
        // world-readable is tightened.
        let token = token.trim().to_owned();
        write_private(&path, token.as_bytes())?;
        return Ok(token);
    }
    let token = format!("{prefix}_{}", generate_key().trim_start_matches("sk_"));
    write_private(&path, token.as_bytes())?;
    Ok(token)
}

/// The data key file every node seals with (encryption at rest, decision
/// 0031): made once in `DIR/data-keys` (mode 0600) and reused on resume,
/// so a resumed cluster replays what it stored before.
fn demo_data_keys(dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("data-keys");
    if !path.exists() {
        once_seal::KeyRing::generate()
            .create_file(&path)
            .with_context(|| format!("creating {}", path.display()))?;
    }
    once_seal::KeyRing::load(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(path)
}

/// Everything `once up` started; `stores[i]` and `nodes[i]` are region i's.
#[derive(Debug, Default)]
pub(crate) struct Running {
    stores: Vec<ChildProcess>,
    nodes: Vec<ChildProcess>,
    router: Option<ChildProcess>,
}

impl Running {
    /// Front to back: the router first, the stores last, so nothing is
    /// left talking to a member that is already gone.
    async fn stop(self) {
        if let Some(router) = self.router {
            router.stop(STOP_GRACE).await;
        }
        futures_join(self.nodes).await;
        futures_join(self.stores).await;
    }
}

async fn futures_join(children: Vec<ChildProcess>) {
    let stops: Vec<_> = children
        .into_iter()
        .map(|c| tokio::spawn(c.stop(STOP_GRACE)))
        .collect();
    for stop in stops {
        let _ = stop.await;
    }
}

/// How every child is started: the same command lines at the first start,
/// on resume and when a region or a process is restarted. Each start takes
/// extra environment (a restart's clock skew); the first start adds none.
#[derive(Debug)]
pub(crate) struct Plan {
    dir: PathBuf,
    listen: SocketAddr,
    wan_latency: u64,
    layout: Layout,
    logs: PathBuf,
    provider_url: String,
    admin_tokens: AdminTokens,
    api_keys: String,
    data_keys: PathBuf,
    /// The CA and every process's certificate.
    pki: Pki,
}

impl Plan {
    fn latency(&self) -> Vec<String> {
        vec!["--wan-latency".into(), self.wan_latency.to_string()]
    }

    /// raft-store's groups besides the directory: one per region after
    /// the first, whose tenants the directory keeps
    /// (docs/decisions/0063-a-raft-group-per-home-region.md).
    fn store_groups(&self) -> Vec<String> {
        self.layout.regions[1..]
            .iter()
            .map(|r| r.name.clone())
            .collect()
    }

    /// The flag that names the groups to a node or a router (none with
    /// one region).
    fn store_groups_flag(&self) -> Vec<String> {
        let groups = self.store_groups();
        if groups.is_empty() {
            return Vec::new();
        }
        vec!["--store-groups".into(), groups.join(",")]
    }

    fn database_url(&self, region: &RegionLayout) -> String {
        self.dir
            .join(format!("region-{}.db", region.name))
            .display()
            .to_string()
    }

    /// A member's raft log and state machine.
    fn store_data_dir(&self, region: &RegionLayout) -> PathBuf {
        self.dir.join(format!("store-{}", region.name))
    }

    fn store(
        &self,
        region: &RegionLayout,
        extra: &[(&'static str, String)],
    ) -> anyhow::Result<ChildProcess> {
        let mut args: Vec<String> = vec![
            "store".into(),
            "--id".into(),
            region.store_id.to_string(),
            "--raft-addr".into(),
            region.store_raft.to_string(),
            "--api-addr".into(),
            region.store_api.to_string(),
            "--admin-listen".into(),
            region.store_admin.to_string(),
            "--data-dir".into(),
            self.store_data_dir(region).display().to_string(),
            "--peers".into(),
            self.layout.peers(),
            "--region".into(),
            region.name.clone(),
            "--peer-regions".into(),
            self.layout.peer_regions(),
            // The directory keeps the first region's tenants: its lead
            // follows them, as every other group's follows its own.
            "--directory-home".into(),
            self.layout.regions[0].name.clone(),
        ];
        let groups = self.store_groups();
        if !groups.is_empty() {
            args.extend(["--groups".into(), groups.join(",")]);
        }
        args.extend(self.pki.flags(&format!("store-{}", region.name)));
        args.extend(store_timing(self.wan_latency));
        args.extend(self.latency());
        let mut env = vec![("ONCE_ADMIN_TOKEN", self.admin_tokens.store.clone())];
        env.extend_from_slice(extra);
        ChildProcess::spawn(&self.logs, &format!("store-{}", region.name), &args, &env)
    }

    fn node(
        &self,
        region: &RegionLayout,
        extra: &[(&'static str, String)],
    ) -> anyhow::Result<ChildProcess> {
        let mut args: Vec<String> = vec![
            "node".into(),
            "--listen".into(),
            region.node.to_string(),
            "--admin-listen".into(),
            region.node_admin.to_string(),
            "--region".into(),
            region.name.clone(),
            "--database-url".into(),
            self.database_url(region),
            "--idempotency-store".into(),
            "raft".into(),
            "--store-endpoints".into(),
            self.layout.store_endpoints_from(region).join(","),
            "--provider-url".into(),
            self.provider_url.clone(),
            "--data-keys".into(),
            self.data_keys.display().to_string(),
        ];
        args.extend(self.store_groups_flag());
        args.extend(self.pki.flags(&format!("node-{}", region.name)));
        // Clients reach nodes through the router only: mutual TLS, routers
        // (and the operator) answered.
        args.extend(["--api-callers".into(), "routers".into()]);
        args.extend(self.latency());
        let mut env = vec![
            ("ONCE_API_KEYS", self.api_keys.clone()),
            ("ONCE_ADMIN_TOKEN", self.admin_tokens.node.clone()),
        ];
        env.extend_from_slice(extra);
        ChildProcess::spawn(&self.logs, &format!("node-{}", region.name), &args, &env)
    }

    fn router(&self, extra: &[(&'static str, String)]) -> anyhow::Result<ChildProcess> {
        let home = &self.layout.regions[0];
        let mut args: Vec<String> = vec![
            "router".into(),
            "--listen".into(),
            self.listen.to_string(),
            "--admin-listen".into(),
            self.layout.router_admin.to_string(),
            "--region".into(),
            home.name.clone(),
            "--store-endpoints".into(),
            self.layout.store_endpoints_from(home).join(","),
            "--nodes".into(),
            self.layout.nodes(),
            "--node-admins".into(),
            self.layout.node_admins(),
            // Drills write next to cluster.json by default: the console
            // lists them.
            "--drill-reports".into(),
            self.dir.display().to_string(),
        ];
        args.extend(self.store_groups_flag());
        args.extend(self.pki.flags("router"));
        args.extend(self.latency());
        // Its own token, and the nodes' for the console's record reads and
        // resolves; never the store operator's.
        let mut env = vec![
            ("ONCE_API_KEYS", self.api_keys.clone()),
            ("ONCE_ADMIN_TOKEN", self.admin_tokens.router.clone()),
            ("ONCE_NODE_ADMIN_TOKEN", self.admin_tokens.node.clone()),
        ];
        env.extend_from_slice(extra);
        ChildProcess::spawn(&self.logs, "router", &args, &env)
    }
}

/// Homes tenant i in region i mod N, unless it already has a placement (a
/// resumed cluster keeps whatever failovers decided).
async fn place_tenants(
    plan: &Plan,
    keys: &[(String, String)],
) -> anyhow::Result<Vec<(String, String)>> {
    let layout = &plan.layout;
    let endpoints = layout.store_endpoints_from(&layout.regions[0]);
    let options = ClientOptions {
        tls: Some(plan.pki.operator().clone()),
        ..ClientOptions::default()
    };
    let store = StoreGroups::new(&endpoints, &plan.store_groups(), options)?;
    let names: Vec<String> = layout.regions.iter().map(|r| r.name.clone()).collect();
    let mut homes = Vec::new();
    for (i, (tenant, _)) in keys.iter().enumerate() {
        let home = names[i % names.len()].clone();
        let standbys: Vec<String> = names.iter().filter(|n| **n != home).cloned().collect();
        // In its home's group: the directory assigns it there first.
        let placed = match store.place_first(tenant, &home, &standbys).await? {
            Reply::Placement(p) => p.home,
            Reply::PlacementConflict { current: Some(p) } => p.home,
            other => anyhow::bail!("placing {tenant}: unexpected answer {other:?}"),
        };
        homes.push((tenant.clone(), placed));
    }
    Ok(homes)
}

/// Polls the members until one of them leads (a fresh cluster elects within
/// a few election timeouts).
async fn wait_for_leader(plan: &Plan, endpoints: &[String]) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + START_LIMIT;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let operator = once_store_client::admin::Operator::with_tls(None, Some(plan.pki.operator()));
    loop {
        tick.tick().await;
        match operator.leader_endpoint(endpoints).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(anyhow::Error::new(e).context("waiting for a raft-store leader"));
            }
            Err(_) => {}
        }
    }
}

async fn start(plan: &Plan, running: &mut Running) -> anyhow::Result<()> {
    let layout = &plan.layout;
    for region in &layout.regions {
        running.stores.push(plan.store(region, &[])?);
    }
    for (store, region) in running.stores.iter_mut().zip(&layout.regions) {
        store
            .wait_ready(
                plan.pki.http(),
                &format!("https://{}/api/status", region.store_api),
                START_LIMIT,
            )
            .await?;
    }
    wait_for_leader(plan, &layout.store_endpoints_from(&layout.regions[0])).await?;
    for region in &layout.regions {
        running.nodes.push(plan.node(region, &[])?);
    }
    for (node, region) in running.nodes.iter_mut().zip(&layout.regions) {
        node.wait_ready(
            plan.pki.http(),
            &format!("http://{}/readyz", region.node_admin),
            START_LIMIT,
        )
        .await?;
    }
    let mut router = plan.router(&[])?;
    router
        .wait_ready(
            plan.pki.http(),
            &format!("http://{}/readyz", plan.layout.router_admin),
            START_LIMIT,
        )
        .await?;
    running.router = Some(router);
    Ok(())
}

pub async fn run(mut args: UpArgs) -> anyhow::Result<()> {
    // Before any child exists, and for the whole run: a SIGTERM at any
    // moment from here on stops the cluster (see `shutdown`).
    let mut shutdown = Shutdown::listen().context("listening for SIGTERM and Ctrl-C")?;
    // Before anything is written: the directory and every file in it are
    // the owner's alone (see `private_dir`).
    private_dir::enclose(&args.dir)?;
    std::fs::create_dir_all(args.dir.join("logs"))
        .with_context(|| format!("creating {}", args.dir.display()))?;
    // Every path written down (cluster.json's database URLs, the children's
    // arguments) is absolute: a drill reads cluster.json from wherever it
    // runs, not from the directory `once up` was started in.
    args.dir = std::fs::canonicalize(&args.dir)
        .with_context(|| format!("resolving {}", args.dir.display()))?;
    let layout =
        Layout::load_or_create(&args.dir, usize::from(args.regions), &[args.listen.port()])?;
    layout.ensure_free(args.listen)?;
    let keys = demo_keys(&args.dir)?;
    let admin_tokens = AdminTokens::load_or_create(&args.dir)?;
    let data_keys = demo_data_keys(&args.dir)?;
    let lifetimes = pki::CertLifetimes::new(args.cert_lifetime, args.cert_renew_before)
        .map_err(super::config_error)?;
    let pki = Pki::prepare(&args.dir.join("tls"), &layout, lifetimes)?;

    // The provider simulator, in this process: nodes reach it over real
    // HTTP, exactly as they would a real provider. Its ledger is journaled
    // in DIR, so a resumed cluster's provider remembers what it charged (a
    // recovery after the restart finds the charge by key, as it would at a
    // real provider, instead of charging again).
    let simulator = once_provider_sim::Simulator::with_journal(&args.dir.join(PROVIDER_LEDGER))
        .context("opening the provider simulator's ledger")?;
    let (provider_addr_tx, provider_addr_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(once_provider_sim::serve(
        simulator,
        "127.0.0.1:0".parse().expect("static address"),
        move |addr| {
            let _ = provider_addr_tx.send(addr);
        },
        std::future::pending(),
    ));
    let provider_url = format!(
        "http://{}",
        provider_addr_rx
            .await
            .context("starting the provider simulator")?
    );

    let plan = Arc::new(Plan {
        dir: args.dir.clone(),
        listen: args.listen,
        wan_latency: args.wan_latency,
        layout: layout.clone(),
        logs: args.dir.join("logs"),
        provider_url: provider_url.clone(),
        admin_tokens: admin_tokens.clone(),
        api_keys: keys
            .iter()
            .map(|(t, k)| format!("{t}:demo:{k}"))
            .collect::<Vec<_>>()
            .join(","),
        data_keys: data_keys.clone(),
        pki,
    });
    // For as long as `once up` runs: leaves issued again before they expire.
    tokio::spawn(pki::keep_renewed(plan.clone()));
    let mut running = Running::default();
    let homes = tokio::select! {
        homes = async {
            start(&plan, &mut running).await?;
            place_tenants(&plan, &keys).await
        } => homes,
        () = shutdown.requested() => Err(anyhow::anyhow!("interrupted while starting")),
    };
    let homes = match homes {
        Ok(homes) => homes,
        Err(e) => {
            running.stop().await;
            return Err(e.context(format!("see the logs in {}", plan.logs.display())));
        }
    };

    let router_url = format!("http://{}", args.listen);
    let console_url = format!("http://{}/console", layout.router_admin);
    let cluster_path = args.dir.join("cluster.json");
    let running = Arc::new(tokio::sync::Mutex::new(running));
    // Fresh each run, like the endpoint's port: only cluster.json has it.
    let control_token = format!("ctl_{}", generate_key().trim_start_matches("sk_"));
    let control_url = control::serve(
        control::Control {
            plan: plan.clone(),
            running: running.clone(),
            cluster_path: cluster_path.clone(),
        },
        once_edge::AdminToken::new(control_token.clone()).context("the control token")?,
    )
    .await?;
    let running_now = running.lock().await;
    let cluster = json!({
        "control": { "url": control_url, "token": control_token },
        "router": { "url": router_url, "admin_url": format!("http://{}", layout.router_admin), "console_url": console_url, "pid": running_now.router.as_ref().map(ChildProcess::pid) },
        "provider": { "url": provider_url },
        // One per role and power; the console and the drills take the
        // ones they need.
        "admin_tokens": admin_tokens.describe(),
        // The drill opens raft-store's sealed answers with it.
        "data_keys": data_keys.display().to_string(),
        "tls": plan.pki.describe(),
        "wan_latency_ms": args.wan_latency,
        // raft-store's groups besides the directory (`once store --groups`).
        "store_groups": plan.store_groups(),
        "tenants": keys.iter().zip(&homes).map(|((t, k), (_, home))| json!({
            "id": t, "api_key": k, "home_region": home,
        })).collect::<Vec<_>>(),
        "regions": layout.regions.iter().zip(running_now.nodes.iter().zip(&running_now.stores)).map(|(r, (node, store))| json!({
            "name": r.name,
            "node": { "url": format!("https://{}", r.node), "admin_url": format!("http://{}", r.node_admin), "pid": node.pid() },
            "store": { "id": r.store_id, "api_url": format!("https://{}", r.store_api), "admin_url": format!("https://{}", r.store_admin), "raft_addr": r.store_raft.to_string(), "pid": store.pid() },
            "database_url": plan.database_url(r),
        })).collect::<Vec<_>>(),
    });
    drop(running_now);
    // Every tenant's API key, the admin tokens and the control token are
    // in it.
    write_private(&cluster_path, &serde_json::to_vec_pretty(&cluster)?)?;

    Welcome {
        router_url: &router_url,
        console_url: &console_url,
        provider_url: &provider_url,
        admin_tokens: &admin_tokens,
        keys: &keys,
        homes: &homes,
        cluster_path: &cluster_path,
    }
    .print(&args);
    shutdown.requested().await;
    println!("stopping every process of the cluster …");
    std::mem::take(&mut *running.lock().await).stop().await;
    Ok(())
}

/// What `once up` prints once the cluster answers.
struct Welcome<'a> {
    router_url: &'a str,
    console_url: &'a str,
    provider_url: &'a str,
    admin_tokens: &'a AdminTokens,
    keys: &'a [(String, String)],
    homes: &'a [(String, String)],
    cluster_path: &'a Path,
}

impl Welcome<'_> {
    fn print(&self, args: &UpArgs) {
        let Self {
            router_url,
            console_url,
            provider_url,
            admin_tokens,
            keys,
            homes,
            cluster_path,
        } = *self;
        let regions = match args.regions {
            1 => "1 region".to_owned(),
            n => format!("{n} regions"),
        };
        println!(
            "once is up: {router_url}  ({regions}, data in {})",
            args.dir.display()
        );
        for ((t, k), (_, home)) in keys.iter().zip(homes) {
            println!("  tenant {t:<8} home {home:<9} API key {k}");
        }
        println!("  provider simulator {provider_url}  (ledger: GET {provider_url}/charges)");
        println!("  router admin token   {}", admin_tokens.router);
        println!("  node admin token     {}", admin_tokens.node);
        println!("  store operator token {}", admin_tokens.store);
        // The token rides in the fragment: browsers never send it anywhere.
        println!("  console {console_url}#token={}", admin_tokens.router);
        println!("  cluster description: {}", cluster_path.display());
        // Every store link is mutual TLS; `cluster.json` names the operator's.
        println!(
            "  certificates (mutual TLS): {}",
            args.dir.join("tls").display()
        );
        println!("  logs: {}", args.dir.join("logs").display());
        println!();
        let (tenant, key) = &keys[0];
        println!("Create a payment as {tenant} (run it twice: the second answer is a replay):");
        println!(
            "  curl -si {router_url}/payments -H 'Authorization: Bearer {key}' -H 'Idempotency-Key: order-1' \\\n    \
         -H 'Content-Type: application/json' \\\n    \
         -d '{{\"accountId\":\"acc_1\",\"amount\":\"10.00\",\"currency\":\"EUR\",\"merchantReference\":\"order-1\"}}'"
        );
        println!(
            "Rehearse losing a region: once drill failover --cluster {} --region {}",
            cluster_path.display(),
            homes.first().map_or("eu-west", |(_, h)| h.as_str())
        );
        println!(
            "Ctrl-C stops it; `once up --dir {}` resumes from the same data.",
            args.dir.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn store_timing_keeps_a_heartbeat_of_two_round_trips_and_a_lease_of_six() {
        let timing = |rtt| store_timing(rtt).join(" ");
        let local = "--heartbeat 100ms --election-min 250ms --election-max 400ms";
        assert_eq!(timing(0), local);
        assert_eq!(timing(50), local);
        assert_eq!(
            timing(70),
            "--heartbeat 140ms --election-min 350ms --election-max 420ms"
        );
        assert_eq!(
            timing(200),
            "--heartbeat 400ms --election-min 1000ms --election-max 1200ms"
        );
    }

    #[test]
    fn the_admin_tokens_are_for_the_owner_only_even_when_an_older_once_up_left_them_open() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = AdminTokens::load_or_create(dir.path()).unwrap();
        let path = dir.path().join("node-admin-token");
        assert_eq!(mode(&path), 0o600);

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(AdminTokens::load_or_create(dir.path()).unwrap(), tokens);
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn each_role_gets_its_own_token_and_the_shared_one_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        write_private(
            &dir.path().join("admin-token"),
            b"adm_shared_0123456789abcdef",
        )
        .unwrap();
        let tokens = AdminTokens::load_or_create(dir.path()).unwrap();
        assert!(!dir.path().join("admin-token").exists());
        let all = [&tokens.node, &tokens.router, &tokens.store];
        for (i, token) in all.iter().enumerate() {
            once_edge::AdminToken::new(token.as_str()).expect("strong enough to start a role");
            assert!(all[i + 1..].iter().all(|other| other != token), "{all:?}");
        }
        assert!(tokens.node.starts_with("nadm_") && tokens.store.starts_with("sop_"));
        // A weak token left in a file (hand-edited) is replaced, not used.
        write_private(&dir.path().join("router-admin-token"), b"aaaaaaaaaaaaaaaa").unwrap();
        let again = AdminTokens::load_or_create(dir.path()).unwrap();
        assert_ne!(again.router, "aaaaaaaaaaaaaaaa");
        assert_eq!((again.node, again.store), (tokens.node, tokens.store));
    }

    #[test]
    fn the_data_key_file_is_made_once_for_the_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = demo_data_keys(dir.path()).unwrap();
        assert_eq!(mode(&path), 0o600);
        let first = std::fs::read(&path).unwrap();
        demo_data_keys(dir.path()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), first, "reused on resume");
    }

    #[test]
    fn a_private_file_rewritten_over_a_looser_one_is_tightened_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.json");
        std::fs::write(&path, "an older, longer description").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, b"{}").unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}");
    }
}
