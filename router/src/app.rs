//! Build (connect, bind) and run (serve, refresh, health-check, drain) a
//! router.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::middleware::from_fn_with_state;
use once_edge::observe::{self, Observe, SpanOnly, TraceHeaders};
use once_edge::server::serve_together;
use once_edge::tenants::{self, TenantGates};
use once_edge::{ApiKeys, Server};
use once_store_client::client::ClientOptions;
use once_store_client::groups::StoreGroups;

use crate::config::RouterConfig;
use crate::metrics::Metrics;
use crate::partition::RegionCut;
use crate::placement::PlacementCache;
use crate::reachability::Reachability;
use crate::regions::RegionHealth;
use crate::state::{RouterState, SharedState};
use crate::{admin, console, forward, health, ops};

/// A bound router, not serving yet.
#[derive(Debug)]
pub struct RouterApp {
    public: Server,
    admin: Server,
    state: SharedState,
}

impl RouterApp {
    /// Validates the configuration and binds the listener (port 0 picks one).
    /// Nothing is read from the store yet: the router starts even while the
    /// store is electing, and `/readyz` says when it can route.
    pub async fn build(config: RouterConfig, api_keys: ApiKeys) -> anyhow::Result<Self> {
        config.validate()?;
        let store = StoreGroups::new(
            &config.store_endpoints,
            &config.store_groups,
            // Short: a placement read sits on a request's path after a 421.
            ClientOptions {
                attempt_timeout: Duration::from_secs(2),
                deadline: Duration::from_secs(5),
                // Declared like the node's, so a simulated partition of the
                // store applies to this router too: a router cut off with
                // its region cannot write failovers the majority never saw.
                region: Some(config.region.clone()),
                tls: config.tls.clone(),
                ..ClientOptions::default()
            },
        )
        .context("building the raft-store client")?;
        let store = Arc::new(store);
        // Mutual TLS to nodes with the router's certificate (their URLs are
        // https, checked by validate), plaintext without one.
        let http = match &config.tls {
            Some(tls) => tls.http_client(),
            None => reqwest::Client::builder(),
        };
        let http = http
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(1))
            // Below the nodes' idle timeout (60 s by default), so a pooled
            // connection is never one the node is closing.
            .pool_idle_timeout(Duration::from_secs(30))
            // Redirects are the client's business, not the router's.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .context("building the HTTP client")?;
        let health = RegionHealth::new(config.nodes.regions(), config.health);
        let metrics = Arc::new(Metrics::new());
        let public = Server::bind("public", config.listen, config.limits, metrics.edge.clone())
            .await
            .with_context(|| format!("binding {}", config.listen))?;
        let public = config.public_tls.serve_on(public);
        let admin = Server::bind(
            "admin",
            config.admin_listen,
            config.limits,
            metrics.edge.clone(),
        )
        .await
        .with_context(|| format!("binding the admin listener {}", config.admin_listen))?
        // Probes and operators are answered while forwards swamp the public
        // listener (RELIABILITY.md, finding 17).
        .on_own_thread();
        let reachability = Reachability::new(
            config.fail_fast,
            config
                .nodes
                .regions()
                .flat_map(|r| config.nodes.urls(r))
                .map(String::as_str),
        );
        let state = Arc::new(RouterState {
            reachability,
            placements: Arc::new(PlacementCache::new(store.clone())),
            store,
            health,
            partition: RegionCut::new(&config.region),
            metrics,
            http,
            api_keys: Arc::new(api_keys),
            config,
        });
        Ok(Self {
            public,
            admin,
            state,
        })
    }

    /// The public listener's bound address.
    pub fn address(&self) -> SocketAddr {
        self.public.local_addr()
    }

    /// The admin listener's bound address.
    pub fn admin_address(&self) -> SocketAddr {
        self.admin.local_addr()
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
        let Self {
            public,
            admin,
            state,
        } = self;
        let refresher = tokio::spawn(
            state
                .placements
                .clone()
                .keep_fresh(state.config.placement_refresh, state.metrics.clone()),
        );
        let checker = tokio::spawn(health::watch_regions(state.clone()));
        let drain = state.config.drain_timeout;
        let listeners = vec![
            (public, public_router(state.clone())),
            (admin, admin_router(state.clone())),
        ];
        serve_together(listeners, signal, drain).await;
        refresher.abort();
        checker.abort();
        Ok(())
    }
}

/// The public listener. A forwarded request is authenticated (401) and
/// passes its tenant's gate (429) before its body is read.
pub fn public_router(state: SharedState) -> Router {
    let gates = TenantGates::new(
        state.api_keys.clone(),
        state.config.tenant_limits.clone(),
        state.metrics.edge.clone(),
    );
    let forwarded = forward::router().route_layer(from_fn_with_state(gates, tenants::admit));
    let routes = Router::new().merge(forwarded).merge(ops::health(&state));
    observe::outermost(routes, observing()).with_state(state)
}

/// The admin listener: metrics, probes and the operator endpoints.
pub fn admin_router(state: SharedState) -> Router {
    let routes = Router::new()
        .merge(admin::router())
        .merge(console::router())
        .merge(ops::metrics(&state))
        .merge(ops::health(&state));
    observe::outermost(routes, observing()).with_state(state)
}

/// Outermost route layer: the server span and trace ids. A forwarded
/// answer keeps the node's trace headers (same trace, the node's span).
fn observing() -> Observe {
    Observe::new(SpanOnly, TraceHeaders::KeepUpstream)
}
