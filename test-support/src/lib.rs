//! `once-test-support`: the harness the workspace's test suites share, a
//! dev-dependency only (`publish = false`, linked into no binary). It
//! depends on no crate of the workspace but `once-tls` (which depends on
//! none), so each of them — `once-edge` included — can use it without a
//! cycle; what needs a workspace type stays
//! with its suite (`tests/api/helpers.rs`: backends, nodes, the raft-store
//! cluster; `router/tests/common`: an in-process router).
//!
//! One concern per module:
//!
//! | module | what |
//! |---|---|
//! | [`process`] | child processes: quiet environment, ready line on stdout, stdout drained, killed on drop; SIGTERM, SIGKILL, exit; whether a pid runs |
//! | [`wait`] | waiting for a state until a deadline, never for a time: [`wait::eventually`], [`wait::until`], [`wait::http_ready`] |
//! | [`ports`] | ports outside the ephemeral range; an address nothing listens on |
//! | [`services`] | PostgreSQL, NATS and the like: present, or skipped locally and failed under `CI` |
//! | [`postgres`] | a PostgreSQL database of the test's own, dropped when it ends |
//! | [`postgres_server`] | a PostgreSQL server of the test's own (TLS only, a certificate the test made), stopped when it ends |
//! | [`cleanup`] | async cleanup run from a `Drop` |
//! | [`stoppable`] | a server in the test's runtime, stopped and shown to stop cleanly |
//! | [`serve`] | stand-in HTTP servers (axum) on port 0 |
//! | [`proxy`] | a TCP proxy that cuts links by source address: partitions without a firewall |
//! | [`raw`] | raw HTTP/1.1 on a socket; waiting for the server to close one |
//! | [`fixtures`] | API keys, admin tokens, a valid payment body |
//! | [`client`] | the payments API from a client: `post`, `send`, [`client::Answer`] |
//! | [`metrics`] | a metric from a Prometheus `/metrics` page |
//! | [`router_admin`] | a router's admin API: partition switch, health view |
//! | [`pki`] | a test's own CA and per-process certificates (mutual TLS as `once up` runs it) |
//! | [`web_pki`] | a CA and server certificates for host names (a public listener, a database) |

pub mod cleanup;
pub mod client;
pub mod fixtures;
pub mod metrics;
pub mod pki;
pub mod ports;
pub mod postgres;
pub mod postgres_server;
pub mod process;
pub mod proxy;
pub mod raw;
pub mod router_admin;
pub mod serve;
pub mod services;
pub mod stoppable;
pub mod wait;
pub mod web_pki;
