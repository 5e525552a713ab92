//! Build (connect, bind) and run (serve, refresh, health-check, drain) a
//! router.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::middleware;
use once_node::ApiKeys;
use once_node::error::ApiError;
use once_raft_store::client::{ClientOptions, StoreClient};
use tokio::net::TcpListener;

use crate::config::RouterConfig;
use crate::metrics::Metrics;
use crate::partition::RegionCut;
use crate::placement::PlacementCache;
use crate::regions::RegionHealth;
use crate::state::{RouterState, SharedState};
use crate::{admin, forward, health, http, ops};

/// A bound router, not serving yet.
#[derive(Debug)]
pub struct RouterApp {
    listener: TcpListener,
    state: SharedState,
}

impl RouterApp {
    /// Validates the configuration and binds the listener (port 0 picks one).
    /// Nothing is read from the store yet: the router starts even while the
    /// store is electing, and `/readyz` says when it can route.
    pub async fn build(config: RouterConfig, api_keys: ApiKeys) -> anyhow::Result<Self> {
        config.validate()?;
        let store = StoreClient::new(
            &config.store_endpoints,
            // Short: a placement read sits on a request's path after a 421.
            ClientOptions {
                attempt_timeout: Duration::from_secs(2),
                deadline: Duration::from_secs(5),
                // Declared like the node's, so a simulated partition of the
                // store applies to this router too: a router cut off with
                // its region cannot write failovers the majority never saw.
                region: Some(config.region.clone()),
                ..ClientOptions::default()
            },
        )
        .context("building the raft-store client")?;
        let store = Arc::new(store);
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(1))
            // Redirects are the client's business, not the router's.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .context("building the HTTP client")?;
        let health = RegionHealth::new(config.nodes.regions(), config.health);
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding {}", config.listen))?;
        let state = Arc::new(RouterState {
            placements: Arc::new(PlacementCache::new(store.clone())),
            store,
            health,
            partition: RegionCut::new(&config.region),
            metrics: Arc::new(Metrics::new()),
            http,
            api_keys,
            config,
        });
        Ok(Self { listener, state })
    }

    pub fn address(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or(self.state.config.listen)
    }

    pub fn state(&self) -> &SharedState {
        &self.state
    }

    /// Serves until `signal`, then drains in-flight requests for up to
    /// `drain_timeout`. The placement refresher and the health checker run
    /// alongside and stop with it.
    pub async fn run_until(
        self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Self { listener, state } = self;
        let refresher = tokio::spawn(
            state
                .placements
                .clone()
                .keep_fresh(state.config.placement_refresh, state.metrics.clone()),
        );
        let checker = tokio::spawn(health::watch_regions(state.clone()));
        let drain = state.config.drain_timeout;
        let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
        let server = axum::serve(listener, router(state)).with_graceful_shutdown(async move {
            signal.await;
            let _ = stopping_tx.send(());
        });
        let result = tokio::select! {
            result = server => result.context("serving"),
            () = async {
                let _ = stopping_rx.await;
                tokio::time::sleep(drain).await;
            } => {
                tracing::warn!("drain timeout reached; closing remaining connections");
                Ok(())
            }
        };
        refresher.abort();
        checker.abort();
        result
    }
}

/// Every route, under the observing layer.
pub fn router(state: SharedState) -> Router {
    Router::new()
        .merge(forward::router())
        .merge(admin::router())
        .merge(ops::router())
        .fallback(|| async { ApiError::NotFound })
        // Outermost, so every answer (401s, 404s, 503s included) carries
        // its trace id and internal causes are logged inside the span.
        .layer(middleware::from_fn(http::observe))
        .with_state(state)
}
