//! Building and running a node: bind, connect, migrate, serve, drain.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceBuilder;
use tracing::{info, warn};

use crate::auth::ApiKeys;
use crate::config::{NodeConfig, StoreMode};
use crate::domain::{Clock, SystemClock};
use crate::error::ApiError;
use crate::idempotency::{IdempotencyStore, ReplayCache};
use crate::metrics::Metrics;
use crate::provider::{HttpProvider, InProcessProvider, PaymentProvider};
use crate::raft::RaftStore;
use crate::sql::{Database, Materialized, SqlStore};
use crate::state::{App, AppState};
use crate::{admin, http, ops, payments, recovery, sweeper};

/// A node that has bound its port and migrated its database, ready to run.
#[derive(Debug)]
pub struct Application {
    listener: TcpListener,
    state: AppState,
    events: crate::events::Events,
}

/// What a node is built from besides its config. Tests swap the clock and
/// the provider; production uses the defaults.
#[derive(Debug)]
pub struct Builder {
    config: NodeConfig,
    api_keys: ApiKeys,
    clock: Arc<dyn Clock>,
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
        self.clock = clock;
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
        let metrics = Metrics::new();
        let events_db =
            Database::connect(&self.config.database_url, self.config.events.pool_size()).await?;
        let events = crate::events::Events::connect(
            events_db,
            &self.config.events,
            self.clock.clone(),
            metrics.events.clone(),
            self.events,
        )
        .await?;
        let store: Arc<dyn IdempotencyStore> = match &self.config.idempotency_store {
            StoreMode::Sql => Arc::new(SqlStore::new(db)),
            StoreMode::Raft(raft) => Arc::new(RaftStore::new(
                raft,
                self.config.region.clone(),
                Materialized::new(db),
            )?),
        };
        let provider: Arc<dyn PaymentProvider> = match (&self.config.provider, self.provider) {
            (Some(http), _) => Arc::new(HttpProvider::new(http.clone())?),
            (None, provider) => provider,
        };
        let listener = TcpListener::bind(self.config.listen)
            .await
            .with_context(|| format!("binding {}", self.config.listen))?;
        let state = AppState(Arc::new(App {
            replays: ReplayCache::new(self.config.replay_cache_bytes),
            config: self.config,
            api_keys: self.api_keys,
            store,
            provider,
            clock: self.clock,
            metrics,
        }));
        state.metrics.export_over_otlp();
        Ok(Application {
            listener,
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
            clock: Arc::new(SystemClock),
            provider: Arc::new(InProcessProvider::default()),
            events: Default::default(),
        }
    }

    /// The bound address (the real port when the config asked for port 0).
    pub fn address(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The node's event path (its database, broker and email sender).
    pub fn events(&self) -> &crate::events::Events {
        &self.events
    }

    /// Serves until `shutdown` resolves, then gives in-flight requests up to
    /// `drain_timeout` to finish. Work cut off by the drain deadline is safe:
    /// its record stays `IN_PROGRESS` and is taken over after its lease.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Application {
            listener,
            state,
            events,
        } = self;
        let drain = state.config.drain_timeout;
        let (stop_workers, workers_stopped) = watch::channel(false);
        let sweeper = tokio::spawn(sweeper::run(state.clone(), workers_stopped.clone()));
        let recovery = tokio::spawn(recovery::run(state.clone(), workers_stopped.clone()));
        let event_workers = events.spawn(workers_stopped).await;

        let (draining_tx, draining_rx) = tokio::sync::oneshot::channel::<()>();
        let signal = async move {
            shutdown.await;
            info!("shutdown requested; draining in-flight requests");
            let _ = draining_tx.send(());
        };
        let server = axum::serve(listener, router(state)).with_graceful_shutdown(signal);
        let mut server = tokio::spawn(async move { server.await });
        tokio::select! {
            result = &mut server => result??,
            Ok(()) = draining_rx => {
                match tokio::time::timeout(drain, &mut server).await {
                    Ok(result) => result??,
                    Err(_) => {
                        warn!(?drain, "drain deadline passed; abandoning remaining requests");
                        server.abort();
                    }
                }
            }
        }
        let _ = stop_workers.send(true);
        let _ = sweeper.await;
        let _ = recovery.await;
        event_workers.join(drain).await;
        info!("node stopped");
        Ok(())
    }
}

/// The whole HTTP surface, with its layers. Order matters: requests pass the
/// layers top to bottom.
pub fn router(state: AppState) -> Router {
    let limit = state.config.concurrency_limit;
    Router::new()
        .merge(payments::routes::router())
        .merge(ops::router())
        .merge(admin::router())
        .fallback(|| async { ApiError::NotFound })
        .layer(
            ServiceBuilder::new()
                // Outermost, so every answer (shed or panicked ones included)
                // gets a trace id and lands in the latency histogram.
                .layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    http::observe,
                ))
                // A panicking handler answers 500 in the API's error shape
                // instead of dropping the connection.
                .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
                    ApiError::Internal(anyhow::anyhow!("handler panicked")).into_response()
                }))
                // Shed load beyond the concurrency limit with a fast 503
                // rather than queueing until clients time out and retry.
                .layer(HandleErrorLayer::new(|_: tower::BoxError| async {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        ApiError::Unavailable(anyhow::anyhow!("overloaded")),
                    )
                        .into_response()
                }))
                .load_shed()
                .concurrency_limit(limit),
        )
        .with_state(state)
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    // A process started by a supervisor that may die without a word
    // (`once up` killed outright) stops when the supervisor's end of its
    // stdin closes, instead of running on as an orphan.
    let lifeline = async {
        if std::env::var(LIFELINE_ENV).as_deref() == Ok("stdin") {
            lifeline_closed().await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
        _ = lifeline => tracing::warn!("the supervising process is gone (stdin closed): shutting down"),
    }
}

/// `ONCE_LIFELINE=stdin`: [`shutdown_signal`] also fires when stdin reaches
/// its end. Set by `once up` for its children, whose stdin is a pipe it
/// holds open for as long as it lives.
pub const LIFELINE_ENV: &str = "ONCE_LIFELINE";

/// Resolves when stdin reaches its end (or fails, which means the same).
/// The blocking read runs on a plain thread of its own, not tokio's
/// blocking pool: a runtime waits for its blocking tasks when it shuts
/// down, and a read that never returns would keep a SIGTERM'd process alive.
async fn lifeline_closed() {
    use std::io::Read;
    let (closed, on_close) = tokio::sync::oneshot::channel::<()>();
    let reader = std::thread::Builder::new()
        .name("lifeline".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 64];
            while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
            let _ = closed.send(());
        });
    match reader {
        Ok(_) => {
            let _ = on_close.await;
        }
        // No thread, no lifeline: the process still stops on signals.
        Err(_) => std::future::pending::<()>().await,
    }
}

/// For tests: a drain long enough to be observable, short enough not to hang.
pub const TEST_DRAIN: Duration = Duration::from_secs(5);
