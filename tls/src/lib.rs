//! once-tls: who each process is, and the mutual TLS of every internal
//! link (DESIGN §10, decision 0032).
//!
//! # Layout
//!
//! - [`identity`]: [`Identity`] — a [`Role`] (store member, node, router,
//!   operator) in a region, carried as the URI SAN
//!   `spiffe://once/<region>/<role>` and read back from a peer's certificate.
//! - [`ca`]: [`LocalCa`] — makes a CA, reads it back, issues a certificate
//!   per process (identity, DNS and IP SANs, server and client auth); keys
//!   written 0600, files replaced atomically.
//! - [`files`]: [`TlsFiles`] — where a process's CA, certificate and key
//!   are (`--tls-ca`, `--tls-cert`, `--tls-key`).
//! - [`public`]: the server side of a public listener (router, node):
//!   the API's own certificate, no client certificate asked.
//! - [`reload`]: the certificate and key swapped in place when their files
//!   change (mtime polling), for the server and the client side alike.
//! - [`validity`]: how long certificates live (leaves 90 days unless asked
//!   otherwise, never past their CA) and reading a file's validity back.
//! - [`config`]: [`Tls`] — the rustls `ServerConfig` that requires a client
//!   certificate chained to the CA, the `ClientConfig` (and `reqwest`
//!   client) that presents one and trusts only the CA.
//!
//! ```text
//!  once up / once certs ── LocalCa::issue ──► ca.pem, <proc>.pem, <proc>-key.pem (0600)
//!                                                  │ --tls-ca/--tls-cert/--tls-key
//!  client process ── Tls::http_client ──mTLS──► server process (Tls::server_config)
//!                                                  └─ peer certificate → Identity → authorise
//! ```

pub mod ca;
pub mod config;
pub mod files;
pub mod identity;
pub mod public;
pub mod reload;
pub mod validity;

use std::path::{Path, PathBuf};

pub use ca::LocalCa;
pub use config::Tls;
pub use files::TlsFiles;
pub use identity::{Identity, IdentityError, Role};
pub use validity::Validity;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Pem { path: PathBuf, reason: String },
    #[error("{0} exists: not replacing a CA whose certificates are in use")]
    Exists(PathBuf),
    #[error("making a certificate: {0}")]
    Certificate(String),
    #[error("the certificate {0} names no spiffe://once/<region>/<role> identity")]
    NoIdentity(PathBuf),
    #[error("--tls-ca, --tls-cert and --tls-key go together: give all three or none")]
    Incomplete,
    #[error(transparent)]
    Rustls(#[from] rustls::Error),
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

impl TlsError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            source,
        }
    }

    pub(crate) fn pem(path: &Path, e: impl std::fmt::Display) -> Self {
        Self::Pem {
            path: path.to_owned(),
            reason: e.to_string(),
        }
    }
}

impl From<rcgen::Error> for TlsError {
    fn from(e: rcgen::Error) -> Self {
        Self::Certificate(e.to_string())
    }
}
