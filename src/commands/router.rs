//! `once router`: the region's entry point — authenticate, forward to the
//! tenant's home region, health-check regions and fail tenants over.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args};
use once_router::{HealthConfig, NodeDirectory, RouterApp, RouterConfig};

use super::config_error;

#[derive(Debug, Args)]
#[command(after_help = super::tls::ROLE_HELP)]
pub struct RouterArgs {
    /// Address to listen on; port 0 picks a free one (printed on stdout).
    #[arg(long, env = "ONCE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The admin listener: `/metrics`, `/admin/*` (admin token from
    /// `ONCE_ADMIN_TOKEN`), health and readiness. Port 0 picks a free one.
    #[arg(long, env = "ONCE_ADMIN_LISTEN", default_value = "127.0.0.1:9090")]
    pub admin_listen: SocketAddr,
    #[command(flatten)]
    pub edge: super::edge::EdgeArgs,
    #[command(flatten)]
    pub tenants: super::edge::TenantArgs,
    /// The router's certificate (a router identity), presented to
    /// raft-store and to nodes (whose URLs must then be https://).
    #[command(flatten)]
    pub tls: super::tls::TlsArgs,
    #[command(flatten)]
    pub public_tls: super::tls::PublicTlsArgs,
    /// This router's region: tenants without a placement are served here.
    #[arg(long, env = "ONCE_REGION", default_value = "local")]
    pub region: String,
    /// raft-store client API endpoints, comma-separated (this region's first).
    #[arg(
        long,
        env = "ONCE_STORE_ENDPOINTS",
        value_delimiter = ',',
        required = true
    )]
    pub store_endpoints: Vec<String>,
    /// raft-store's groups besides the directory, one per home region
    /// (`once store --groups`): placements are read from every group, and a
    /// failover or failback is written to each (docs/decisions/0063).
    #[arg(long, env = "ONCE_STORE_GROUPS", value_delimiter = ',')]
    pub store_groups: Vec<String>,
    /// Key file of `tenant:principal:sha256hex` lines (the node's format).
    /// Plaintext development keys come from `ONCE_API_KEYS`.
    #[arg(long, env = "ONCE_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,
    /// Nodes of every region: `REGION=URL,REGION=URL,…`; repeat a region
    /// for several nodes (round-robin).
    #[arg(long, env = "ONCE_NODES", value_delimiter = ',', required = true)]
    pub nodes: Vec<String>,
    /// Time between health checks of every region's nodes (also their
    /// timeout). With 3 failures a killed region is down 400–600 ms after
    /// it stops answering; raise it where a region's round trip from the
    /// router approaches it.
    #[arg(long, env = "ONCE_HEALTH_CHECK_INTERVAL", default_value = "200ms", value_parser = humantime::parse_duration)]
    pub health_check_interval: Duration,
    /// Consecutive failed rounds (every node of the region failing) before
    /// the region is down and its tenants fail over.
    #[arg(long, env = "ONCE_HEALTH_CHECK_FAILURES", default_value_t = 3)]
    pub health_check_failures: u32,
    /// Consecutive good rounds before a down region is healthy again
    /// (tenants are not moved back: `POST /admin/failback`).
    #[arg(long, env = "ONCE_HEALTH_CHECK_SUCCESSES", default_value_t = 5)]
    pub health_check_successes: u32,
    /// The least time a region must have been up to take another region's
    /// tenants in an automatic failover (the detection window if longer):
    /// regions that failed together come back seconds apart.
    #[arg(long, env = "ONCE_HEALTH_CHECK_SETTLE", default_value = "3s", value_parser = humantime::parse_duration)]
    pub health_check_settle: Duration,
    /// How long a region's rounds must fail with nothing saying it is gone
    /// (no refused connection, raft-store still hearing its member) before
    /// it is down anyway: a node that answers nothing while its region's
    /// member is heard is taken for busy until then (decision 0085).
    #[arg(long, env = "ONCE_HEALTH_CHECK_UNCONFIRMED_AFTER", default_value = "2s", value_parser = humantime::parse_duration)]
    pub health_check_unconfirmed_after: Duration,
    /// How often the whole placement table is re-read (a 421 re-reads at once).
    #[arg(long, env = "ONCE_PLACEMENT_REFRESH", default_value = "2s", value_parser = humantime::parse_duration)]
    pub placement_refresh: Duration,
    /// Move tenants off a region the health checks declare down
    /// (`--auto-failover=false` only reports it).
    #[arg(long, env = "ONCE_AUTO_FAILOVER", default_value_t = true, action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub auto_failover: bool,
    /// Milliseconds to wait before forwarding to another region: a
    /// simulated WAN round trip for local multi-region runs.
    #[arg(long, env = "ONCE_WAN_LATENCY", default_value_t = 0)]
    pub wan_latency: u64,
    /// Largest request body, in bytes, buffered for forwarding (bigger: 413).
    #[arg(long, env = "ONCE_BODY_LIMIT", default_value_t = 64 * 1024)]
    pub body_limit: usize,
    /// Longest wait for a node's answer to a forwarded request.
    #[arg(long, env = "ONCE_NODE_TIMEOUT", default_value = "25s", value_parser = humantime::parse_duration)]
    pub node_timeout: Duration,
    /// How long in-flight requests may finish after SIGTERM.
    #[arg(long, env = "ONCE_DRAIN_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// Node admin listeners of every region, `REGION=URL,…`: the console
    /// lists stuck records and the audit trail from them and sends resolve
    /// actions to them (with the admin token).
    #[arg(long, env = "ONCE_NODE_ADMINS", value_delimiter = ',')]
    pub node_admins: Vec<String>,
    /// Directory whose `*/report.json` are failover drill reports, listed
    /// by the console.
    #[arg(long, env = "ONCE_DRILL_REPORTS")]
    pub drill_reports: Option<PathBuf>,
    /// Parse and validate everything, print the effective configuration
    /// (without secrets) and exit without binding or connecting.
    #[arg(long)]
    pub check_config: bool,
    /// Development only: no certificate, plaintext to raft-store and to
    /// nodes (`http://` URLs), which then carry tenants' API keys in the
    /// clear. Without it, --tls-* are required and every link is TLS.
    #[arg(long)]
    pub insecure_plaintext: bool,
}

pub fn config_of(args: &RouterArgs) -> anyhow::Result<RouterConfig> {
    let nodes = NodeDirectory::parse(&args.nodes)?;
    let mut config = RouterConfig::new(
        args.listen,
        &args.region,
        args.store_endpoints
            .iter()
            .map(|e| e.trim().to_owned())
            .filter(|e| !e.is_empty())
            .collect(),
        nodes,
    );
    config.store_groups = args.store_groups.clone();
    config.health = HealthConfig {
        interval: args.health_check_interval,
        failures: args.health_check_failures,
        successes: args.health_check_successes,
        settle: args.health_check_settle,
        unconfirmed_after: args.health_check_unconfirmed_after,
    };
    config.placement_refresh = args.placement_refresh;
    config.auto_failover = args.auto_failover;
    // From the environment only (`ONCE_ADMIN_TOKEN`); unset: no admin endpoints.
    config.admin_token = super::edge::admin_token()?;
    // The nodes' admin token, for the console's reads and resolves
    // (`ONCE_NODE_ADMIN_TOKEN`); unset: the router's own.
    config.node_admin_token = super::edge::token_from(super::edge::NODE_ADMIN_TOKEN_ENV)?;
    config.admin_listen = args.admin_listen;
    config.limits = args.edge.limits()?;
    config.tenant_limits = args.tenants.limits()?;
    config.wan_latency = Duration::from_millis(args.wan_latency);
    config.body_limit = args.body_limit;
    config.node_timeout = args.node_timeout;
    config.drain_timeout = args.drain_timeout;
    config.node_admins = if args.node_admins.iter().all(|e| e.trim().is_empty()) {
        None
    } else {
        Some(NodeDirectory::parse(&args.node_admins)?)
    };
    config.drill_reports = args.drill_reports.clone();
    config.tls = args.tls.load(&[once_tls::Role::Router])?;
    let nodes = args.nodes.iter().map(|n| ("--nodes", n.as_str()));
    let store = args
        .store_endpoints
        .iter()
        .map(|e| ("--store-endpoints", e.as_str()));
    super::plaintext::check_links(
        "router",
        config.tls.is_some(),
        args.insecure_plaintext,
        nodes.chain(store),
    )?;
    config.public_tls = args.public_tls.load()?;
    config.validate()?;
    Ok(config)
}

pub async fn run(args: RouterArgs) -> anyhow::Result<()> {
    let config = config_of(&args).map_err(config_error)?;
    let keys = super::api_keys::load(args.api_keys_file.as_deref()).map_err(config_error)?;
    if args.check_config {
        println!(
            "{}",
            serde_json::json!({
                "role": "router",
                "listen": config.listen.to_string(),
                "publicTls": config.public_tls.describe(),
                "adminListen": config.admin_listen.to_string(),
                "limits": super::edge::describe(&config.limits),
                "tenantLimits": super::edge::TenantArgs::describe(&config.tenant_limits),
                "region": config.region,
                "storeEndpoints": config.store_endpoints,
                "nodes": config.nodes.describe(),
                "apiKeys": keys.len(),
                "healthCheck": {
                    "interval": humantime::format_duration(config.health.interval).to_string(),
                    "failures": config.health.failures,
                    "successes": config.health.successes,
                    "settle": humantime::format_duration(config.health.settle).to_string(),
                    "unconfirmedAfter": humantime::format_duration(config.health.unconfirmed_after).to_string(),
                },
                "placementRefresh": humantime::format_duration(config.placement_refresh).to_string(),
                "autoFailover": config.auto_failover,
                "adminEndpoints": config.admin_token.is_some(),
                "nodeAdmins": config.node_admins.as_ref().map(NodeDirectory::describe),
                "drillReports": config.drill_reports,
                "wanLatencyMs": config.wan_latency.as_millis() as u64,
                "bodyLimit": config.body_limit,
                "nodeTimeout": humantime::format_duration(config.node_timeout).to_string(),
                "drainTimeout": humantime::format_duration(config.drain_timeout).to_string(),
            })
        );
        return Ok(());
    }
    let app = RouterApp::build(config, keys).await?;
    let addr = app.address();
    let admin = app.admin_address();
    tracing::info!(%addr, %admin, region = %app.state().config.region, "router listening");
    // Machine-readable lines on stdout for harnesses and scripts.
    println!("admin on http://{admin}");
    println!(
        "listening on {}://{addr}",
        app.state().config.public_tls.scheme()
    );
    app.run_until(once_edge::shutdown_signal()).await
}
