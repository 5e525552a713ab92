//! `once node`: the payments API of one region.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use once_edge::PublicTls;
use once_edge::public_tls::AllowedRoles;
use once_node::config::{NodeRole, StoreMode};
use once_node::payments::response::ResponseSchema;
use once_node::provider::HttpProviderConfig;
use once_node::raft::RaftStoreConfig;
use once_node::{ApiKeys, Application, NodeConfig};
use once_store_client::client::ClientOptions;

use super::config_error;

#[derive(Debug, Args)]
#[command(after_help = super::tls::ROLE_HELP)]
pub struct NodeArgs {
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
    /// The node's certificate (a node identity), presented to raft-store
    /// and, with `--api-callers routers`, to routers.
    #[command(flatten)]
    pub tls: super::tls::TlsArgs,
    /// Who the public listener answers: `any` client with an API key
    /// (plaintext, or TLS with `--public-tls-*`), or `routers` only — mutual
    /// TLS with the node's certificate (`--tls-*`), answering routers and
    /// operators and refusing every other caller, as in a deployment where
    /// clients reach nodes only through routers.
    #[arg(long, env = "ONCE_API_CALLERS", value_enum, default_value_t = ApiCallers::Any)]
    pub api_callers: ApiCallers,
    #[command(flatten)]
    pub public_tls: super::tls::PublicTlsArgs,
    /// The jobs this process runs: `api` (the payments API), `events` (the
    /// outbox publisher, consumers and email sender), `recovery` (the
    /// recovery worker, the replay-window sweeper, re-encryption) or `all`.
    /// A deployment runs each as its own Deployment against the same
    /// database; without the `api` role the public listener answers its
    /// probes only.
    #[arg(long, env = "ONCE_ROLE", value_enum, default_value_t = RoleArg::All)]
    pub role: RoleArg,
    /// This node's region.
    #[arg(long, env = "ONCE_REGION", default_value = "local")]
    pub region: String,
    /// `postgres://…` or a SQLite file (created on first start, WAL mode).
    #[arg(long, env = "ONCE_DATABASE_URL", default_value = "once-data/node.db")]
    pub database_url: String,
    #[arg(long, env = "ONCE_MAX_DB_CONNECTIONS", default_value_t = 16)]
    pub max_db_connections: u32,
    /// Key file of `tenant:principal:sha256hex` lines (see `once keys hash`).
    /// Plaintext development keys come from `ONCE_API_KEYS`.
    #[arg(long, env = "ONCE_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,
    /// How long an owner holds a record before others may take it over.
    #[arg(long, env = "ONCE_LEASE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub lease: Duration,
    /// How long finished operations replay (part of the API contract).
    #[arg(long, env = "ONCE_REPLAY_WINDOW", default_value = "24h", value_parser = humantime::parse_duration)]
    pub replay_window: Duration,
    /// How long an expired record's metadata is kept.
    #[arg(long, env = "ONCE_METADATA_RETENTION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub metadata_retention: Duration,
    #[arg(long, env = "ONCE_SWEEP_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub sweep_interval: Duration,
    /// Response schema version new answers are rendered with (1 or 2).
    #[arg(long, env = "ONCE_RESPONSE_SCHEMA", default_value_t = ResponseSchema::CURRENT.version())]
    pub response_schema: i32,
    /// In the raft store mode, wait for a new payment's finish (one more
    /// consensus write) before answering. Off by default: the answer goes
    /// out as soon as the provider has answered, and the finish follows
    /// (docs/decisions/0054-answer-before-the-finish.md). No effect in the
    /// sql mode, which always finishes first.
    #[arg(long, env = "ONCE_FINISH_BEFORE_ANSWER")]
    pub finish_before_answer: bool,
    /// How long in-flight requests may finish after SIGTERM.
    #[arg(long, env = "ONCE_DRAIN_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// Base URL of the payment provider (e.g. `once provider-sim`). Without
    /// it the node uses an in-process provider, for trying the API only.
    #[arg(long, env = "ONCE_PROVIDER_URL")]
    pub provider_url: Option<String>,
    /// Per-attempt provider request timeout (connect timeout is 1s; 3 attempts).
    #[arg(long, env = "ONCE_PROVIDER_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub provider_timeout: Duration,
    #[arg(long, env = "ONCE_PROVIDER_CONNECT_TIMEOUT", default_value = "1s", value_parser = humantime::parse_duration)]
    pub provider_connect_timeout: Duration,
    /// How often the recovery worker looks for abandoned operations.
    #[arg(long, env = "ONCE_RECOVERY_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub recovery_interval: Duration,
    /// NATS server for events (JetStream); unset: the in-process bus.
    #[arg(long, env = "ONCE_NATS_URL")]
    pub nats_url: Option<String>,
    /// JetStream stream for events (created if absent).
    #[arg(long, env = "ONCE_EVENTS_STREAM", default_value = "ONCE_EVENTS")]
    pub events_stream: String,
    /// Events are published on `<prefix>.<event type>`.
    #[arg(
        long,
        env = "ONCE_EVENTS_SUBJECT_PREFIX",
        default_value = "once.events"
    )]
    pub events_subject_prefix: String,
    /// Deliveries of one message before it is dead-lettered.
    #[arg(long, env = "ONCE_CONSUMER_MAX_ATTEMPTS", default_value_t = 5)]
    pub consumer_max_attempts: u32,
    /// How long the broker waits for a consumer's ack before redelivering.
    #[arg(long, env = "ONCE_CONSUMER_ACK_WAIT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub consumer_ack_wait: Duration,
    /// Delivery loops per consumer in this node (deliveries handled at once).
    #[arg(long, env = "ONCE_CONSUMER_INSTANCES", default_value_t = 16)]
    pub consumer_instances: usize,
    /// Email service endpoint for receipts (deduplicates on `Idempotency-Key`);
    /// unset: an in-memory fake sender.
    #[arg(long, env = "ONCE_EMAIL_SINK_URL")]
    pub email_sink_url: Option<String>,
    /// Webhooks: the wait before a failed delivery's second attempt; it
    /// doubles per failure up to `--webhook-retry-cap`.
    #[arg(long, env = "ONCE_WEBHOOK_RETRY_BASE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub webhook_retry_base: Duration,
    /// Webhooks: the longest wait between two attempts.
    #[arg(long, env = "ONCE_WEBHOOK_RETRY_CAP", default_value = "1h", value_parser = humantime::parse_duration)]
    pub webhook_retry_cap: Duration,
    /// Webhooks: how long a delivery is retried before it is dead-lettered.
    #[arg(long, env = "ONCE_WEBHOOK_RETRY_BUDGET", default_value = "3d", value_parser = humantime::parse_duration)]
    pub webhook_retry_budget: Duration,
    /// Webhooks: how long a merchant's endpoint has to answer one attempt.
    #[arg(long, env = "ONCE_WEBHOOK_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub webhook_timeout: Duration,
    /// Webhooks: also deliver to loopback, private and link-local
    /// addresses (receivers on this machine or in this network). For
    /// development clusters only: a tenant could otherwise make the node
    /// POST into the cluster's own network.
    #[arg(long, env = "ONCE_WEBHOOK_ALLOW_PRIVATE_TARGETS")]
    pub webhook_allow_private_targets: bool,
    /// Where idempotency records live: `sql` (the regional database) or
    /// `raft` (raft-store, shared by every region; payments stay in the
    /// regional database).
    #[arg(long, env = "ONCE_IDEMPOTENCY_STORE", value_enum, default_value_t = StoreKind::Sql)]
    pub idempotency_store: StoreKind,
    /// raft-store members' client API addresses, comma-separated, this
    /// region's member first (`--idempotency-store raft`).
    #[arg(long, env = "ONCE_STORE_ENDPOINTS", value_delimiter = ',')]
    pub store_endpoints: Vec<String>,
    /// Development only (`--idempotency-store raft`): no certificate,
    /// plaintext to raft-store. Without it the raft mode needs --tls-* and
    /// TLS store endpoints (`host:port` means TLS with a certificate).
    #[arg(long)]
    pub insecure_plaintext: bool,
    /// raft-store's groups besides the directory, one per home region
    /// (`once store --groups`): a tenant's commands go to the group the
    /// directory assigned it to (docs/decisions/0063).
    #[arg(long, env = "ONCE_STORE_GROUPS", value_delimiter = ',')]
    pub store_groups: Vec<String>,
    /// Simulated round trip in milliseconds before every call to a store
    /// member outside this region (all but the first endpoint): lets one
    /// machine behave like several regions (`once up --wan-latency`).
    #[arg(long, env = "ONCE_WAN_LATENCY", default_value_t = 0)]
    pub wan_latency: u64,
    /// The data key file: stored answers and command payloads are sealed
    /// with it (AES-256-GCM; the last key listed seals, every one opens)
    /// and business keys digested. Re-read when it changes (`once keys
    /// rotate`). Required with PostgreSQL and the raft store; without it
    /// the sql mode on SQLite creates `data-keys` beside its database.
    #[arg(long, env = "ONCE_DATA_KEYS")]
    pub data_keys: Option<PathBuf>,
    /// Parse and validate everything, print the effective configuration
    /// (without secrets) and exit without binding or connecting.
    #[arg(long)]
    pub check_config: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RoleArg {
    Api,
    Events,
    Recovery,
    All,
}

impl From<RoleArg> for NodeRole {
    fn from(role: RoleArg) -> Self {
        match role {
            RoleArg::Api => Self::Api,
            RoleArg::Events => Self::Events,
            RoleArg::Recovery => Self::Recovery,
            RoleArg::All => Self::All,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApiCallers {
    Any,
    Routers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    Sql,
    Raft,
}

fn load_keys(args: &NodeArgs) -> anyhow::Result<ApiKeys> {
    super::api_keys::load(args.api_keys_file.as_deref())
}

/// The public listener's transport, from `--api-callers` and
/// `--public-tls-*`.
fn public_tls(args: &NodeArgs, identity: Option<&once_tls::Tls>) -> anyhow::Result<PublicTls> {
    let public = args.public_tls.load()?;
    match (args.api_callers, identity, public) {
        (ApiCallers::Any, _, public) => Ok(public),
        (ApiCallers::Routers, Some(tls), PublicTls::Plain) => Ok(PublicTls::Mutual {
            tls: tls.clone(),
            allowed: AllowedRoles::ROUTERS,
        }),
        (ApiCallers::Routers, None, _) => anyhow::bail!(
            "--api-callers routers speaks mutual TLS with the node's certificate: give --tls-ca, --tls-cert and --tls-key"
        ),
        (ApiCallers::Routers, Some(_), _) => anyhow::bail!(
            "--public-tls-* is for a node that clients reach directly (--api-callers any); behind routers the public listener presents the node's own certificate"
        ),
    }
}

pub fn config_of(args: &NodeArgs) -> anyhow::Result<NodeConfig> {
    let mut config = NodeConfig::new(args.listen, &args.region, &args.database_url);
    config.role = args.role.into();
    let identity = args.tls.load(&[once_tls::Role::Node])?;
    config.public_tls = public_tls(args, identity.as_ref())?;
    config.max_db_connections = args.max_db_connections;
    config.lease = args.lease;
    config.replay_window = args.replay_window;
    config.metadata_retention = args.metadata_retention;
    config.sweep_interval = args.sweep_interval;
    config.drain_timeout = args.drain_timeout;
    config.recovery_interval = args.recovery_interval;
    // From the environment only (`ONCE_ADMIN_TOKEN`); unset: no admin endpoints.
    config.admin_token = super::edge::admin_token()?;
    config.admin_listen = args.admin_listen;
    config.limits = args.edge.limits()?;
    config.tenant_limits = args.tenants.limits()?;
    config.provider = args.provider_url.as_ref().map(|url| {
        let mut provider = HttpProviderConfig::new(url);
        provider.request_timeout = args.provider_timeout;
        provider.connect_timeout = args.provider_connect_timeout;
        provider
    });
    config.events.nats_url = args.nats_url.clone();
    config.events.stream = args.events_stream.clone();
    config.events.subject_prefix = args.events_subject_prefix.clone();
    config.events.max_attempts = args.consumer_max_attempts;
    config.events.ack_wait = args.consumer_ack_wait;
    config.events.email_sink_url = args.email_sink_url.clone();
    config.events.consumer_instances = args.consumer_instances;
    config.webhooks.retry_base = args.webhook_retry_base;
    config.webhooks.retry_cap = args.webhook_retry_cap;
    config.webhooks.retry_budget = args.webhook_retry_budget;
    config.webhooks.attempt_timeout = args.webhook_timeout;
    config.webhooks.allow_private_targets = args.webhook_allow_private_targets;
    if args.webhook_allow_private_targets {
        tracing::warn!(
            "--webhook-allow-private-targets: webhooks may be delivered to loopback, private and link-local addresses; never in production"
        );
    }
    if args.idempotency_store == StoreKind::Raft {
        super::plaintext::check_links(
            "node",
            identity.is_some(),
            args.insecure_plaintext,
            args.store_endpoints
                .iter()
                .map(|e| ("--store-endpoints", e.as_str())),
        )?;
    } else if args.insecure_plaintext {
        anyhow::bail!(
            "--insecure-plaintext is for --idempotency-store raft: a node in sql mode dials no store"
        );
    }
    config.idempotency_store = match args.idempotency_store {
        StoreKind::Sql => StoreMode::Sql,
        StoreKind::Raft => StoreMode::Raft(RaftStoreConfig {
            endpoints: args.store_endpoints.clone(),
            groups: args.store_groups.clone(),
            client: ClientOptions {
                wan_latency: Duration::from_millis(args.wan_latency),
                local_endpoints: 1,
                // Declared so a member cut off from this region refuses us.
                region: Some(args.region.clone()),
                tls: identity,
                ..ClientOptions::default()
            },
        }),
    };
    config.data_keys = args.data_keys.clone();
    if let Some(path) = &args.data_keys {
        // A key file open to other users, or that does not parse, is bad
        // configuration: exit 64 before anything binds (the node reads it
        // again when it starts).
        super::key_files::refuse_loose("--data-keys", path)?;
        once_seal::KeyRing::load(path)
            .with_context(|| format!("--data-keys {}", path.display()))?;
    }
    config.response_schema = ResponseSchema::from_version(args.response_schema)
        .with_context(|| format!("unknown response schema version {}", args.response_schema))?;
    config.answer_before_finish =
        matches!(config.idempotency_store, StoreMode::Raft(_)) && !args.finish_before_answer;
    config.validate()?;
    Ok(config)
}

/// The database URL with any password replaced, for printing.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

pub async fn run(args: NodeArgs) -> anyhow::Result<()> {
    let config = config_of(&args).map_err(config_error)?;
    let keys = load_keys(&args).map_err(config_error)?;
    if args.check_config {
        println!(
            "{}",
            serde_json::json!({
                "role": "node",
                "jobs": config.role.as_str(),
                "listen": config.listen.to_string(),
                "publicTls": config.public_tls.describe(),
                "adminListen": config.admin_listen.to_string(),
                "limits": super::edge::describe(&config.limits),
                "tenantLimits": super::edge::TenantArgs::describe(&config.tenant_limits),
                "region": config.region,
                "databaseUrl": redact_url(&config.database_url),
                "maxDbConnections": config.max_db_connections,
                "apiKeys": keys.len(),
                "lease": humantime::format_duration(config.lease).to_string(),
                "replayWindow": humantime::format_duration(config.replay_window).to_string(),
                "metadataRetention": humantime::format_duration(config.metadata_retention).to_string(),
                "sweepInterval": humantime::format_duration(config.sweep_interval).to_string(),
                "responseSchema": config.response_schema.version(),
                "answerBeforeFinish": config.answer_before_finish,
                "drainTimeout": humantime::format_duration(config.drain_timeout).to_string(),
                "provider": config.provider.as_ref().map_or("in-process".to_owned(), |p| p.base_url.clone()),
                "recoveryInterval": humantime::format_duration(config.recovery_interval).to_string(),
                "adminEndpoints": config.admin_token.is_some(),
                "dataKeys": config.data_keys.as_ref().map_or_else(
                    || "beside the SQLite database".to_owned(),
                    |p| p.display().to_string(),
                ),
                "idempotencyStore": match &config.idempotency_store {
                    StoreMode::Sql => serde_json::json!({"mode": "sql"}),
                    StoreMode::Raft(raft) => serde_json::json!({"mode": "raft", "endpoints": raft.endpoints}),
                },
                "events": {
                    "broker": if config.events.nats_url.is_some() { "nats" } else { "in-process" },
                    "stream": config.events.stream,
                    "subjectPrefix": config.events.subject_prefix,
                    "maxAttempts": config.events.max_attempts,
                    "emailSender": if config.events.email_sink_url.is_some() { "http" } else { "fake" },
                },
            })
        );
        return Ok(());
    }
    let app = Application::builder(config, keys).build().await?;
    let addr = app.address();
    let admin = app.admin_address();
    tracing::info!(%addr, %admin, region = %app.state().config.region, "node listening");
    // Machine-readable lines on stdout for harnesses and scripts.
    println!("admin on http://{admin}");
    println!(
        "listening on {}://{addr}",
        app.state().config.public_tls.scheme()
    );
    app.run_until(once_edge::shutdown_signal()).await
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_never_print() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("once-data/node.db"), "once-data/node.db");
    }
}
