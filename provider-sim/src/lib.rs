//! A payment-provider simulator: the one fake in `once`, standing in for
//! what is outside the system. It behaves like a real provider, failures
//! included, so the node's provider client and recovery paths are exercised
//! against the behaviour they will meet in production.
//!
//! # Layout
//!
//! - [`ledger`]: charges by provider idempotency key; the same key never
//!   charges twice and replays its first answer; a different body under the
//!   same key is rejected. Optionally journaled to a file, so a restarted
//!   simulator remembers its charges like a real provider.
//! - [`faults`]: faults armed at run time for the next N charges, and the
//!   outage switch.
//! - [`api`]: the HTTP surface.
//!
//! # HTTP
//!
//! | route | |
//! |---|---|
//! | `POST /charges` + `Idempotency-Key` | charge once per key |
//! | `GET /charges/{key}` | the charge made under `key`, or 404 |
//! | `GET /charges` | the whole ledger |
//! | `POST /faults` `{"mode", "count", "ms"?}` / `DELETE /faults` | arm / clear faults |
//! | `GET /faults` | the faults still armed (each charge consumes one) |
//! | `POST /outage` / `DELETE /outage` / `GET /outage` | start / end / read an outage: every charge and lookup answers `503` meanwhile |
//!
//! Fault modes: `latency` (answer after `ms`), `error_before_charge` (503,
//! nothing charged), `timeout_after_charge` (charge recorded, no answer ever:
//! the connection hangs until the caller gives up), `reset_after_charge`
//! (charge recorded, connection cut mid-answer), `decline` (402). Accounts
//! whose id starts with `acc_nofunds` are always declined.

pub mod api;
pub mod faults;
pub mod ledger;

use std::net::SocketAddr;

pub use api::{ChargeBody, ChargeRecord, Simulator};

/// Binds `listen` and serves `simulator` until `shutdown` resolves, on the
/// edge's server like every role. Returns the bound address through
/// `on_bound` before serving.
pub async fn serve(
    simulator: Simulator,
    listen: SocketAddr,
    on_bound: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let limits = once_edge::ServerLimits {
        // `timeout_after_charge` hangs a charge until its caller gives up,
        // as a provider that lost its answer does; the deadline must not
        // answer for it.
        request_deadline: std::time::Duration::from_secs(3600),
        ..once_edge::ServerLimits::default()
    };
    let server = once_edge::Server::bind(
        "provider",
        listen,
        limits,
        once_edge::EdgeMetrics::default(),
    )
    .await?;
    on_bound(server.local_addr());
    server
        .serve(
            simulator.router(),
            shutdown,
            std::time::Duration::from_secs(5),
        )
        .await;
    Ok(())
}
