//! The HTTP edge of every `once` role: what stands between a socket and a
//! handler, written once. Node, router, raft-store's listeners and the
//! provider simulator all serve through it, so a limit or a fix here holds
//! for every port the system opens.
//!
//! # Layout
//!
//! - [`server`]: the one server builder: connection cap, header/idle
//!   timeouts, the whole-request deadline, one in-flight limit per listener
//!   with load shedding, panic catching, graceful drain, and optionally
//!   TLS ([`Server::with_tls`]; the client's `once_tls::Identity` rides on
//!   each request for the role's authorisation). [`limits`] holds its
//!   tunables and their defaults; [`peers`] what each peer holds of a
//!   listener (its share of connections and requests, idle connections
//!   shed near the cap); `watchdog` when a connection must close.
//! - [`body`]: reading a request body within a size limit and a deadline.
//! - [`error`]: the API's error type, its stable codes and JSON shape.
//! - [`identity`]: tenant and principal names.
//! - [`api_keys`]: `Authorization: Bearer <key>` → (tenant, principal), as a
//!   middleware that runs before any body is read.
//! - [`admin`]: the admin token (a redacting secret, at least 16
//!   characters and not guessable) and the check of every operator
//!   endpoint.
//! - [`admin_throttle`]: failed admin authentications slowed per peer.
//! - [`tenants`]: per-tenant fairness: a token bucket and an in-flight
//!   quota per tenant, `429 RATE_LIMITED` with `Retry-After`.
//! - [`public_tls`]: how a public listener speaks (plain, TLS with the
//!   API's certificate, or mutual TLS answering only some roles: a node
//!   behind routers) and the `403 FORBIDDEN` of the others.
//! - [`path`]: refusing paths that could mean two things (dot segments,
//!   encoded dots and slashes) before routing.
//! - [`observe`]: the server span, trace ids on every answer, and the one
//!   place internal errors are logged.
//! - [`ops`]: `/healthz`, `/readyz`, `/metrics`.
//! - [`metrics`]: the edge's own counters (connections, shed, deadlines,
//!   per-tenant admission).
//! - [`own_runtime`]: a runtime with a thread of its own, for probes and
//!   control loops that must not wait behind client work.
//! - [`shutdown`]: SIGTERM, Ctrl-C and the supervisor's lifeline.
//!
//! # A request through the edge
//!
//! ```text
//! accept ─ cap or the peer's share reached? close ───────────────────────── (edge_connections_refused_total)
//!   └─ connection: header read timeout from accept / first byte, idle timeout between requests
//!        └─ request: peer's share, catch panic ─ in-flight limit (full: 503 SERVICE_OVERLOADED, Retry-After)
//!             ─ deadline (503) ─ body read deadline (408) ─ path check (400) ─ router
//!                  public API routes: observe ─ API key (401) ─ tenant gate (429) ─ handler
//! ```

pub mod admin;
pub mod admin_throttle;
pub mod api_keys;
pub mod body;
pub mod error;
pub mod identity;
pub mod limits;
pub mod metrics;
pub mod observe;
pub mod ops;
pub mod own_runtime;
pub mod path;
pub mod peers;
pub mod public_tls;
pub mod server;
pub mod shutdown;
pub mod tenants;
mod watchdog;

pub use admin::AdminToken;
pub use api_keys::{ApiKeys, Caller};
pub use error::{ApiError, ErrorBody, ErrorCode, InternalCause};
pub use identity::{PrincipalId, TenantId};
pub use limits::ServerLimits;
pub use metrics::EdgeMetrics;
pub use own_runtime::OwnRuntime;
pub use public_tls::PublicTls;
pub use server::Server;
pub use shutdown::{LIFELINE_ENV, shutdown_signal};
pub use tenants::{TenantLimit, TenantLimits};
