//! Build (connect, bind) and run (serve, refresh, health-check, drain) a
//! router.
//!
//! Two runtimes: the process's, where the public listener forwards clients'
//! requests, and the control runtime (a thread of its own), where the admin
//! listener answers probes and operators and the control loops run — the
//! placement refresher, the health checker and the failovers it starts, and
//! the watch of raft-store's members that corroborates it. A
//! retry storm on the public listener then cannot starve what tells
//! Kubernetes the router is alive, nor what loads the table it routes by
//! (RELIABILITY.md, finding 17). Each runtime has its own clients (store and
//! HTTP): a pooled connection is driven by the runtime that opened it.

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
use once_edge::{ApiKeys, OwnRuntime, Server};
use once_store_client::client::ClientOptions;
use once_store_client::groups::StoreGroups;

use crate::config::RouterConfig;
use crate::metrics::Metrics;
use crate::partition::RegionCut;
use crate::placement::PlacementCache;
use crate::reachability::Reachability;
use crate::regions::RegionHealth;
use crate::state::{RouterState, SharedState};
use crate::{admin, console, forward, health, ops, store_view};

/// A bound router, not serving yet.
#[derive(Debug)]
pub struct RouterApp {
    public: Server,
    admin: Server,
    state: SharedState,
    /// The admin listener's and the control loops' runtime.
    control: OwnRuntime,
}

impl RouterApp {
    /// Validates the configuration and binds the listener (port 0 picks one).
    /// Nothing is read from the store yet: the router starts even while the
    /// store is electing, and `/readyz` says when it can route.
    pub async fn build(config: RouterConfig, api_keys: ApiKeys) -> anyhow::Result<Self> {
        config.validate()?;
        let control = OwnRuntime::start("router-control").context("starting the control thread")?;
        let store = Arc::new(store_client(&config)?);
        let http = node_client(&config)?;
        let health = Arc::new(RegionHealth::new(config.nodes.regions(), config.health));
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
        .on_runtime(control.handle().clone());
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
            placements: Arc::new(PlacementCache::new(
                store.clone(),
                Arc::new(store_client(&config)?),
            )),
            store,
            health,
            store_view: Arc::default(),
            unsettled: Default::default(),
            partition: RegionCut::new(&config.region),
            metrics,
            http,
            control_http: node_client(&config)?,
            failbacks: Default::default(),
            api_keys: Arc::new(api_keys),
            config,
        });
        Ok(Self {
            public,
            admin,
            state,
            control,
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
    /// alongside on the control runtime and stop with it.
    pub async fn run_until(
        self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Self {
            public,
            admin,
            state,
            control,
        } = self;
        let refresher = control.handle().spawn(
            state
                .placements
                .clone()
                .keep_fresh(state.config.placement_refresh, state.metrics.clone()),
        );
        let checker = control.handle().spawn(health::watch_regions(state.clone()));
        let members = control.handle().spawn(store_view::watch_members(
            state.store.directory().clone(),
            state.store_view.clone(),
        ));
        let drain = state.config.drain_timeout;
        let listeners = vec![
            (public, public_router(state.clone())),
            (admin, admin_router(state.clone())),
        ];
        serve_together(listeners, signal, drain).await;
        refresher.abort();
        checker.abort();
        members.abort();
        // Only now: the admin listener and the control clients' connections
        // lived on it until every listener drained.
        drop(control);
        Ok(())
    }
}

/// A raft-store client for one runtime's use.
fn store_client(config: &RouterConfig) -> anyhow::Result<StoreGroups> {
    StoreGroups::new(
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
    .context("building the raft-store client")
}

/// An HTTP client to the nodes for one runtime's use: mutual TLS with the
/// router's certificate (their URLs are https, checked by validate),
/// plaintext without one.
fn node_client(config: &RouterConfig) -> anyhow::Result<reqwest::Client> {
    let http = match &config.tls {
        Some(tls) => tls.http_client(),
        None => reqwest::Client::builder(),
    };
    http.tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(1))
        // Below the nodes' idle timeout (60 s by default), so a pooled
        // connection is never one the node is closing.
        .pool_idle_timeout(Duration::from_secs(30))
        // Redirects are the client's business, not the router's.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("building the HTTP client")
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
