//! How a role's public listener speaks, and whom it answers (DESIGN §10,
//! decision 0034):
//!
//! | [`PublicTls`] | handshake | who gets an answer |
//! |---|---|---|
//! | `Plain` | none (development; or a proxy in front terminates TLS) | anyone with an API key |
//! | `Server` | the API's own certificate, no client certificate | anyone with an API key |
//! | `Mutual` | the process's identity both ways, a client certificate of the CA required | the [`AllowedRoles`] (a node behind routers: routers and operators), `403 FORBIDDEN` for the CA's other roles |
//!
//! API keys are checked in every mode: mutual TLS says which process is
//! calling, the key which tenant it calls for.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use once_tls::{Identity, Role};
use tokio_rustls::rustls::ServerConfig;

use crate::{ApiError, Server};

/// A public listener's transport.
#[derive(Debug, Clone, Default)]
pub enum PublicTls {
    #[default]
    Plain,
    /// TLS with a certificate for the API's host name (`--public-tls-cert`).
    Server(Arc<ServerConfig>),
    /// Mutual TLS with the process's identity, answering only `allowed`.
    Mutual {
        tls: once_tls::Tls,
        allowed: AllowedRoles,
    },
}

impl PublicTls {
    /// `https` or `http`, for the URL a process prints and a client dials.
    pub fn scheme(&self) -> &'static str {
        match self {
            Self::Plain => "http",
            Self::Server(_) | Self::Mutual { .. } => "https",
        }
    }

    /// What `--check-config` prints for it.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::Plain => "plaintext",
            Self::Server(_) => "tls",
            Self::Mutual { .. } => "mutual tls, routers and operators only",
        }
    }

    /// `server` speaking this transport.
    pub fn serve_on(&self, server: Server) -> Server {
        match self {
            Self::Plain => server,
            Self::Server(config) => server.with_tls(config.clone()),
            Self::Mutual { tls, .. } => server.with_tls(tls.server_config()),
        }
    }

    /// `routes` behind the role check, when the listener answers only some
    /// roles; otherwise unchanged. Apply it outermost but for observation,
    /// so a refusal is still logged and counted.
    pub fn guard<S: Clone + Send + Sync + 'static>(&self, routes: Router<S>) -> Router<S> {
        match self {
            Self::Mutual { allowed, .. } => routes.layer(from_fn_with_state(*allowed, admit)),
            Self::Plain | Self::Server(_) => routes,
        }
    }
}

/// The roles a listener answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllowedRoles(pub &'static [Role]);

impl AllowedRoles {
    /// A node's public API behind routers.
    pub const ROUTERS: Self = Self(&[Role::Router, Role::Operator]);

    fn describe(self) -> String {
        self.0
            .iter()
            .map(|role| role.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The request goes on only if its connection's certificate names one of
/// the allowed roles. The handshake has already refused anyone without a
/// certificate of the CA; this refuses the CA's other roles (a store
/// member, a node calling another node).
async fn admit(State(allowed): State<AllowedRoles>, request: Request, next: Next) -> Response {
    let refusal = match request.extensions().get::<Identity>() {
        Some(identity) if allowed.0.contains(&identity.role()) => return next.run(request).await,
        Some(identity) => format!(
            "this listener answers {} only; the client certificate names {identity}",
            allowed.describe()
        ),
        None => format!(
            "this listener answers {} only, by their client certificates",
            allowed.describe()
        ),
    };
    ApiError::Forbidden(refusal).into_response()
}
