//! Building and running a node: bind, connect, migrate, serve, drain.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::middleware::from_fn_with_state;
use once_edge::observe::{Observe, TraceHeaders};
use once_edge::server::serve_together;
use once_edge::tenants::TenantGates;
use once_edge::{Server, observe, tenants};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::auth::ApiKeys;
use crate::config::{NodeConfig, StoreMode};
use crate::database_clock::{DatabaseClock, RESAMPLE};
use crate::domain::{Clock, SystemClock};
use crate::idempotency::ReplayCache;
use crate::metrics::Metrics;
use crate::provider::{HttpProvider, InProcessProvider, PaymentProvider};
use crate::raft::RaftStore;
use crate::sql::{Database, Dialect, Materialized, SqlStore};
use crate::state::{App, AppState};
use crate::store::Stores;
use crate::{admin, http, ops, recovery, routes, sweeper};

/// A node that has bound its ports and migrated its database, ready to run.
#[derive(Debug)]
pub struct Application {
    public: Server,
    admin: Server,
    state: AppState,
    events: crate::events::Events,
}

/// What a node is built from besides its config. Tests swap the clock and
/// the provider; production uses the defaults.
#[derive(Debug)]
pub struct Builder {
    config: NodeConfig,
    api_keys: ApiKeys,
    /// `None`: the database's clock on PostgreSQL, the system clock on SQLite.
    clock: Option<Arc<dyn Clock>>,
    provider: Arc<dyn PaymentProvider>,
    events: crate::events::runtime::Overrides,
}

impl Builder {
    /// Replaces the broker the config would pick (tests: a stream of their own).
    pub fn event_broker(mut self, broker: Arc<dyn crate::events::Broker>) -> Self {
        self.events.broker = Some(broker);
        self
    }

    pub fn email_sender(
        mut self,
        sender: Arc<dyn crate::events::email_sender::EmailSender>,
    ) -> Self {
        self.events.email_sender = Some(sender);
        self
    }

    /// Replaces the default consumers (ledger, receipt email).
    pub fn consumers(mut self, consumers: Vec<Arc<dyn crate::events::consumer::Consumer>>) -> Self {
        self.events.consumers = Some(consumers);
        self
    }

    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    pub fn provider(mut self, provider: Arc<dyn PaymentProvider>) -> Self {
        self.provider = provider;
        self
    }

    /// Connects and migrates before binding, so a node that listens is a
    /// node whose schema is current.
    pub async fn build(self) -> anyhow::Result<Application> {
        self.config
            .validate()
            .context("invalid node configuration")?;
        let db =
            Database::connect(&self.config.database_url, self.config.max_db_connections).await?;
        db.migrate().await?;
        let clock: Arc<dyn Clock> = match (self.clock, db.dialect) {
            (Some(clock), _) => clock,
            (None, Dialect::Postgres) => DatabaseClock::start(&db.pool, RESAMPLE).await?,
            (None, Dialect::Sqlite) => Arc::new(SystemClock),
        };
        let metrics = Metrics::new();
        // On SQLite the event path writes through the node's own pool, so
        // its effects join the request path's group commit: one writer, one
        // fsync per batch for both (decision 0037). PostgreSQL gives it its
        // own pool, sized for it.
        let events_db = match db.dialect {
            Dialect::Sqlite => db.clone(),
            Dialect::Postgres => {
                Database::connect(&self.config.database_url, self.config.events.pool_size()).await?
            }
        };
        let events = crate::events::Events::connect(
            events_db,
            &self.config.events,
            clock.clone(),
            metrics.events.clone(),
            self.events,
        )
        .await?;
        let data_keys = Arc::new(crate::data_keys::DataKeys::open(
            self.config.data_keys.as_deref(),
            &self.config.database_url,
            matches!(self.config.idempotency_store, StoreMode::Raft(_)),
        )?);
        // Delivery gets a pool of its own on PostgreSQL, so merchants'
        // endpoints never hold a connection the API or the event path needs.
        let webhooks_db = match db.dialect {
            Dialect::Sqlite => db.clone(),
            Dialect::Postgres => {
                Database::connect(&self.config.database_url, self.config.webhooks.pool_size())
                    .await?
            }
        };
        let webhooks = crate::webhooks::Webhooks {
            db: webhooks_db,
            data_keys: data_keys.clone(),
            clock: clock.clone(),
            config: self.config.webhooks.clone(),
            unavailable: match self.config.idempotency_store {
                StoreMode::Sql => None,
                StoreMode::Raft(_) => Some(crate::webhooks::RAFT_MODE),
            },
        };
        let store = match &self.config.idempotency_store {
            StoreMode::Sql => Stores::of(SqlStore::new(db, data_keys.clone())),
            StoreMode::Raft(raft) => Stores::of(RaftStore::new(
                raft,
                self.config.region.clone(),
                Materialized::new(db),
                data_keys.clone(),
            )?),
        };
        let provider: Arc<dyn PaymentProvider> = match (&self.config.provider, self.provider) {
            (Some(http), _) => Arc::new(HttpProvider::new(http.clone())?),
            (None, provider) => provider,
        };
        let public = Server::bind(
            "public",
            self.config.listen,
            self.config.limits,
            metrics.edge.clone(),
        )
        .await
        .with_context(|| format!("binding {}", self.config.listen))?;
        let public = self.config.public_tls.serve_on(public);
        let admin = Server::bind(
            "admin",
            self.config.admin_listen,
            self.config.limits,
            metrics.edge.clone(),
        )
        .await
        .with_context(|| format!("binding the admin listener {}", self.config.admin_listen))?;
        let state = AppState(Arc::new(App {
            replays: ReplayCache::new(self.config.replay_cache_bytes),
            config: self.config,
            api_keys: Arc::new(self.api_keys),
            store,
            provider,
            clock,
            metrics,
            data_keys,
            finishing: Default::default(),
            webhooks,
        }));
        state.metrics.export_over_otlp();
        Ok(Application {
            public,
            admin,
            state,
            events,
        })
    }
}

impl Application {
    pub fn builder(config: NodeConfig, api_keys: ApiKeys) -> Builder {
        Builder {
            config,
            api_keys,
            clock: None,
            provider: Arc::new(InProcessProvider::default()),
            events: Default::default(),
        }
    }

    /// The public API's bound address (the real port when the config asked
    /// for port 0).
    pub fn address(&self) -> SocketAddr {
        self.public.local_addr()
    }

    /// The admin listener's bound address.
    pub fn admin_address(&self) -> SocketAddr {
        self.admin.local_addr()
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The node's event path (its database, broker and email sender).
    pub fn events(&self) -> &crate::events::Events {
        &self.events
    }

    /// Serves until `shutdown` resolves, then stops within `drain_timeout`:
    /// in-flight requests drain while the jobs stop, and the finishes
    /// already answered are written, all by that one deadline. Work cut off
    /// by it is safe: its record stays `IN_PROGRESS` and is taken over after
    /// its lease.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Application {
            public,
            admin,
            state,
            events,
        } = self;
        let drain = state.config.drain_timeout;
        let role = state.config.role;
        let (stop_workers, workers_stopped) = watch::channel(false);
        let mut workers = JoinSet::new();
        if role.runs_recovery() {
            workers.spawn(sweeper::run(state.clone(), workers_stopped.clone()));
            workers.spawn(recovery::run(state.clone(), workers_stopped.clone()));
        }
        workers.spawn(crate::reencryption::run(
            state.clone(),
            workers_stopped.clone(),
            role.runs_recovery(),
        ));
        if role.runs_events() && state.webhooks.unavailable.is_none() {
            workers.spawn(crate::webhooks::dispatcher::run(
                state.webhooks.clone(),
                workers_stopped.clone(),
            ));
        }
        let event_workers = if role.runs_events() {
            events.spawn(workers_stopped).await
        } else {
            crate::events::EventWorkers::default()
        };
        info!(role = role.as_str(), "node jobs started");

        let listeners = vec![
            (public, public_router(state.clone())),
            (admin, admin_router(state.clone())),
        ];
        // One deadline for the whole stop, `drain` after the request: the
        // jobs stop while requests drain, and nothing after waits past it
        // (the pod's grace period is sized to it).
        let deadline = OnceLock::new();
        let shutdown = async {
            shutdown.await;
            let _ = deadline.set(Instant::now() + drain);
            let _ = stop_workers.send(true);
            info!("shutdown requested; draining in-flight requests");
        };
        serve_together(listeners, shutdown, drain).await;
        let deadline = deadline
            .get()
            .copied()
            .unwrap_or_else(|| Instant::now() + drain);
        // A job mid-pass at the deadline (a recovery waiting on a store
        // that does not answer) is aborted: the records it held are taken
        // over after their lease, as after a crash.
        let joined = tokio::time::timeout_at(deadline, async {
            while workers.join_next().await.is_some() {}
        })
        .await;
        if joined.is_err() {
            warn!(
                jobs = workers.len(),
                "jobs still running at the drain deadline; aborted"
            );
            workers.abort_all();
        }
        // Answers already given whose finish is still being written: left
        // unwritten they are recovered after their lease, but written now
        // nobody waits.
        let cut_off = state.finishing.close_and_wait(until(deadline)).await;
        if cut_off > 0 {
            warn!(
                cut_off,
                "finishes still being written at the drain deadline; their records are recovered after their lease"
            );
        }
        event_workers.join(until(deadline)).await;
        info!("node stopped");
        Ok(())
    }
}

/// The time left until `deadline` (none once it has passed).
fn until(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// The public listener: the payments API, its contract and probes. Behind
/// routers only routers and operators get past its mutual TLS (403); a
/// payments request is authenticated (401) and passes its tenant's gate
/// (429) before the handler reads the body.
pub fn public_router(state: AppState) -> Router {
    let routes = Router::new().merge(ops::health(&state));
    // Without the API role the public listener answers its probes only.
    let routes = if state.config.role.serves_api() {
        let gates = TenantGates::new(
            state.api_keys.clone(),
            state.config.tenant_limits.clone(),
            state.metrics.edge.clone(),
        );
        let payments = routes::router().route_layer(from_fn_with_state(gates, tenants::admit));
        routes.merge(payments).merge(ops::openapi())
    } else {
        routes
    };
    let routes = state.config.public_tls.guard(routes);
    observe::outermost(routes, observing(&state)).with_state(state)
}

/// The admin listener: metrics, probes and the operator endpoints.
pub fn admin_router(state: AppState) -> Router {
    let routes = Router::new()
        .merge(admin::router())
        .merge(ops::metrics(&state))
        .merge(ops::health(&state));
    observe::outermost(routes, observing(&state)).with_state(state)
}

/// What the outermost route layer does for the node: the edge's span and
/// trace ids, plus the latency histogram by idempotency outcome.
fn observing(state: &AppState) -> Observe {
    Observe::new(http::RequestMetrics(state.clone()), TraceHeaders::Ours)
}
