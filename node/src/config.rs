//! The node's configuration, already validated. The binary builds it from
//! flags and environment; tests build it directly.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use once_edge::{AdminToken, ServerLimits, TenantLimits};

use crate::payments::response::ResponseSchema;

mod webhooks;
pub use webhooks::WebhookConfig;

/// Which of a node's jobs this process runs (`once node --role`): a
/// deployment runs the API, the event path and recovery as separate
/// Deployments, each sized and scaled for its own load; `once up` and a
/// single node run them all in one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeRole {
    /// The payments API on the public listener.
    Api,
    /// The outbox publisher, the consumers and the email sender.
    Events,
    /// The recovery worker, the replay-window sweeper and re-encryption.
    Recovery,
    #[default]
    All,
}

impl NodeRole {
    pub fn serves_api(self) -> bool {
        matches!(self, Self::Api | Self::All)
    }

    pub fn runs_events(self) -> bool {
        matches!(self, Self::Events | Self::All)
    }

    pub fn runs_recovery(self) -> bool {
        matches!(self, Self::Recovery | Self::All)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Events => "events",
            Self::Recovery => "recovery",
            Self::All => "all",
        }
    }
}

#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The jobs this process runs.
    pub role: NodeRole,
    /// The public API's address; port 0 picks a free port (see `Application::address`).
    pub listen: SocketAddr,
    /// The admin listener: `/metrics`, `/admin/*`, health and readiness.
    pub admin_listen: SocketAddr,
    /// How the public listener speaks and whom it answers: plaintext, TLS
    /// with the API's certificate, or mutual TLS answering routers only
    /// (decision 0034).
    pub public_tls: once_edge::PublicTls,
    /// What each listener tolerates (timeouts, connection cap, in-flight limit).
    pub limits: ServerLimits,
    /// Each tenant's rate and in-flight quota on the public listener.
    pub tenant_limits: TenantLimits,
    /// This node's region, stamped on records and payments.
    pub region: String,
    /// `postgres://…` or a SQLite file (`sqlite://PATH` or a bare path).
    pub database_url: String,
    pub max_db_connections: u32,
    /// How long an owner may hold a record before others may take it over.
    /// Must exceed the provider's request timeout, so a live owner never
    /// loses its lease mid-call.
    pub lease: Duration,
    /// How long a finished operation replays (part of the API contract).
    pub replay_window: Duration,
    /// How long an expired record's metadata is kept for diagnosis.
    pub metadata_retention: Duration,
    pub sweep_interval: Duration,
    /// Rows per expiry or purge statement, small enough never to stall traffic.
    pub sweep_batch: i64,
    pub body_limit: usize,
    /// The shape new answers are rendered with.
    pub response_schema: ResponseSchema,
    /// Answer a new payment once the provider has, and write its finish
    /// after (decision 0054): the raft mode, where a finish is a consensus
    /// write across regions. Every owner renders an outcome into the same
    /// bytes, so an answer given before its finish is the answer recovery
    /// would give. Off: the finish lands before the answer.
    pub answer_before_finish: bool,
    /// In-flight requests get this long to finish after SIGTERM.
    pub drain_timeout: Duration,
    /// How often the recovery worker looks for abandoned operations.
    pub recovery_interval: Duration,
    /// Records one recovery pass takes on.
    pub recovery_batch: i64,
    /// `None`: the in-process provider (tests of the contract only).
    pub provider: Option<crate::provider::HttpProviderConfig>,
    /// Bearer token of the admin endpoints; `None` disables them.
    pub admin_token: Option<AdminToken>,
    /// Bytes of finished answers kept in memory for replays (0 disables).
    pub replay_cache_bytes: u64,
    /// The event path: broker, consumers, email sender.
    pub events: crate::events::EventsConfig,
    /// Webhook delivery's schedule and budgets.
    pub webhooks: WebhookConfig,
    /// Where idempotency records live (DESIGN §5).
    pub idempotency_store: StoreMode,
    /// The data key file (encryption at rest, decision 0031). `None`: the
    /// `sql` mode on a SQLite file creates one beside the database; any
    /// other store refuses to start ([`crate::data_keys::DataKeys::open`]).
    pub data_keys: Option<PathBuf>,
    /// How often the key file is checked for changes (and, while older
    /// keys still seal records, a re-encryption pass runs).
    pub key_poll_interval: Duration,
}

/// The store modes of DESIGN §5.
#[derive(Debug, Clone, Default)]
pub enum StoreMode {
    /// Records in the regional database, next to the payments.
    #[default]
    Sql,
    /// Records in raft-store, shared by every region; payments in the
    /// regional database.
    Raft(crate::raft::RaftStoreConfig),
}

impl NodeConfig {
    /// Defaults for everything but where to listen and what to store in.
    pub fn new(
        listen: SocketAddr,
        region: impl Into<String>,
        database_url: impl Into<String>,
    ) -> Self {
        Self {
            listen,
            region: region.into(),
            database_url: database_url.into(),
            max_db_connections: 16,
            lease: Duration::from_secs(10),
            replay_window: Duration::from_secs(24 * 3600),
            metadata_retention: Duration::from_secs(7 * 24 * 3600),
            sweep_interval: Duration::from_secs(30),
            sweep_batch: 500,
            body_limit: 16 * 1024,
            response_schema: ResponseSchema::CURRENT,
            answer_before_finish: false,
            drain_timeout: Duration::from_secs(10),
            role: NodeRole::All,
            admin_listen: SocketAddr::new(listen.ip(), 0),
            public_tls: once_edge::PublicTls::Plain,
            limits: ServerLimits::default(),
            tenant_limits: TenantLimits::default(),
            replay_cache_bytes: 32 * 1024 * 1024,
            recovery_interval: Duration::from_secs(1),
            recovery_batch: 100,
            provider: None,
            admin_token: None,
            events: crate::events::EventsConfig::default(),
            webhooks: WebhookConfig::default(),
            idempotency_store: StoreMode::Sql,
            data_keys: None,
            key_poll_interval: Duration::from_secs(5),
        }
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(!self.region.is_empty(), "region must not be empty");
        self.limits.validate()?;
        anyhow::ensure!(
            self.lease >= Duration::from_millis(100),
            "lease must be at least 100ms"
        );
        anyhow::ensure!(
            self.replay_window >= self.lease,
            "the replay window must be longer than the lease"
        );
        anyhow::ensure!(self.sweep_batch > 0, "sweep batch must be positive");
        anyhow::ensure!(
            self.max_db_connections > 0,
            "need at least one database connection"
        );
        if let Some(provider) = &self.provider {
            // A live owner must never lose its record while a charge is
            // still in flight: every attempt of one charge fits in the lease.
            anyhow::ensure!(
                provider.worst_case() < self.lease,
                "the lease ({}) must be longer than one provider charge with all its retries ({}): \
                 raise --lease or lower --provider-timeout / --provider-connect-timeout",
                humantime::format_duration(self.lease),
                humantime::format_duration(provider.worst_case()),
            );
        }
        self.events.validate()?;
        self.webhooks.validate()?;
        if let StoreMode::Raft(raft) = &self.idempotency_store {
            anyhow::ensure!(
                !raft.endpoints.is_empty(),
                "--idempotency-store raft needs --store-endpoints"
            );
        }
        // Several nodes share one PostgreSQL database or raft-store: they
        // must share the keys, so none may make its own.
        anyhow::ensure!(
            self.data_keys.is_some()
                || (matches!(self.idempotency_store, StoreMode::Sql)
                    && once_db::sqlite_file(&self.database_url).is_some()),
            "encryption at rest needs --data-keys FILE (ONCE_DATA_KEYS) with PostgreSQL or \
             --idempotency-store raft: every node must seal with the same keys \
             (`once keys init --file FILE` makes a key file)"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_shorter_than_one_charge_with_its_retries_is_refused() {
        let mut config = NodeConfig::new("127.0.0.1:0".parse().unwrap(), "eu", "node.db");
        let provider = crate::provider::HttpProviderConfig::new("http://127.0.0.1:1");
        config.lease = provider.worst_case();
        config.provider = Some(provider.clone());
        let refused = config.validate().unwrap_err().to_string();
        assert!(refused.contains("--lease"), "{refused}");
        config.lease = provider.worst_case() + Duration::from_millis(1);
        config.validate().unwrap();
    }

    #[test]
    fn only_the_sql_mode_on_a_sqlite_file_may_start_without_a_key_file() {
        let listen = "127.0.0.1:0".parse().unwrap();
        NodeConfig::new(listen, "eu", "data/node.db")
            .validate()
            .unwrap();
        let mut pg = NodeConfig::new(listen, "eu", "postgres://u@h/db");
        let refused = format!("{:#}", pg.validate().unwrap_err());
        assert!(refused.contains("--data-keys"), "{refused}");
        pg.data_keys = Some("keys".into());
        pg.validate().unwrap();
        let mut raft = NodeConfig::new(listen, "eu", "data/node.db");
        raft.idempotency_store = StoreMode::Raft(crate::raft::RaftStoreConfig {
            endpoints: vec!["127.0.0.1:1".into()],
            groups: Vec::new(),
            client: Default::default(),
        });
        assert!(raft.validate().is_err());
    }
}
