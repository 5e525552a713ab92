//! The `once` node: the HTTP API, the idempotency engine, payments and the
//! provider client of one region.
//!
//! # Layout
//!
//! - [`app`]: build (connect, migrate, bind) and run (serve, drain) a node.
//! - [`config`]: validated node configuration.
//! - [`state`]: the shared state every handler and worker sees.
//! - [`auth`]: API keys → (tenant, principal).
//! - [`database_clock`]: on PostgreSQL, the node's time is the database's
//!   clock, read every few seconds and carried on the monotonic clock.
//! - [`data_keys`]: encryption at rest — the data key file (or the one
//!   created beside SQLite), its reload, sealing answers and payloads bound
//!   to their record, digests of business keys.
//! - [`domain`]: newtypes — keys, ids, money, the clock (re-exported from the
//!   `once-domain` crate; tenant and principal ids from `once-edge`).
//! - [`idempotency`]: the contract as plain logic — the record, fingerprints,
//!   the decision table, the cache of finished answers.
//! - [`store`]: where records live, one narrow trait per caller (request
//!   path, recovery, operators, sweeper, health, payment reads).
//! - [`sql`]: the `sql` store mode on SQLite or PostgreSQL; the database
//!   itself (connect, dialect, write gate, migrations) is `once-db`'s.
//! - [`raft`]: the `raft` store mode: records in raft-store, payments in
//!   the regional database.
//! - [`payments`]: the resource as data — command, stored payment, answers.
//! - [`engine`]: `POST /payments` under the contract, recovery of abandoned
//!   runs, operators' verdicts on unknown outcomes; its own error type.
//! - [`routes`]: the public API's handlers (`POST /payments`,
//!   `GET /payments/{id}`), mapping engine answers and errors to HTTP.
//! - [`lookups`]: `GET /payments`, a tenant's payments by account or
//!   merchant reference, in creation order, keyset-paginated.
//! - [`provider`]: the payment provider trait and the in-process provider.
//! - [`sweeper`]: expiry of the replay window, in small batches.
//! - [`recovery`]: the worker that finishes abandoned and unknown operations.
//! - [`settling`]: the recovery worker's pass over payment rows left pending
//!   behind their finished records (raft mode, decision 0053).
//! - [`finishing`]: finishes written after their answer went out (raft mode,
//!   decision 0054), and what they are writing.
//! - [`reencryption`]: after a key rotation, re-seals what older data keys
//!   still seal, in small batches; reloads a changed key file.
//! - [`admin`]: operator endpoints (list, show, resolve records), own token.
//! - [`events`]: the `once-events` crate, re-exported: outbox publisher,
//!   broker (NATS JetStream or in-process), deduplicating consumers (ledger,
//!   receipt email), dead letters, and their metrics.
//! - [`http`], [`ops`], [`openapi`], [`metrics`]: the node's part of the
//!   HTTP edge; the rest (server, limits, errors, API keys, tracing) is the
//!   `once-edge` crate's, shared with every role. [`error`] and [`auth`]
//!   re-export it.
//! - [`failpoints`]: crash injection for recovery tests (test builds only;
//!   the `once-failpoints` crate, re-exported).
//!
//! # A request's path
//!
//! ```text
//! POST /payments ─► edge (limits, 503) ─► observe (trace id, metrics) ─► API key (401) ─► tenant gate (429)
//!   ─► key (400) ─► body (400/408/413/422)
//!   ─► execute::create_payment ─► requests.claim ─┬─ won ──► provider.charge ─► requests.finish ─► 201/402
//!                                                 └─ lost ─► decide ─► replay | 409 | 202 | take over
//! ```

pub mod admin;
pub mod app;
pub mod auth;
pub mod config;
pub mod data_keys;
pub mod database_clock;
pub mod domain;
pub mod engine;
pub mod error;
pub mod finishing;
pub mod http;
pub mod idempotency;
pub mod lookups;
pub mod metrics;
pub mod openapi;
pub mod ops;
pub mod payments;
pub mod provider;
pub mod raft;
pub mod recovery;
pub mod reencryption;
pub mod routes;
pub mod settling;
pub mod sql;
pub mod state;
pub mod store;
pub mod sweeper;
pub mod webhook_routes;
pub mod webhooks;

pub use once_events as events;
pub use once_failpoints as failpoints;

pub use app::Application;
pub use auth::ApiKeys;
pub use config::NodeConfig;
pub use once_edge::{LIFELINE_ENV, shutdown_signal};
