//! The flags every process on an internal link shares: the CA it trusts
//! and its own certificate and key (`--tls-ca`, `--tls-cert`, `--tls-key`,
//! or `ONCE_TLS_CA`, `ONCE_TLS_CERT`, `ONCE_TLS_KEY`). The certificate names
//! the process's identity (`spiffe://once/<region>/<role>`); the files are
//! reloaded when they change (see `once_tls::reload`).

use std::path::PathBuf;

use clap::Args;
use once_edge::PublicTls;
use once_tls::{Role, Tls, TlsFiles};

use super::config_error;

/// What the node's and router's `--help` say: the admin token and mutual TLS.
pub const ROLE_HELP: &str = "\
Secrets:
  ONCE_ADMIN_TOKEN (environment only): the bearer token of the operator endpoints on the
  admin listener; at least 16 characters and not guessable (64 bits or more by its own
  characters' entropy: `aaaaaaaaaaaaaaaa` is refused), or the process exits with code 64.
  Unset: the operator endpoints are off (404). Never passed as a flag: a command line shows
  in `ps`. Give each role its own (node admin, router admin, store operator), so one leaked
  token does not open the others.
  ONCE_NODE_ADMIN_TOKEN (environment only, routers): the nodes' admin token, which the
  console presents to read and resolve records on the nodes; unset: the router's own.

Mutual TLS:
  --tls-ca, --tls-cert and --tls-key (or ONCE_TLS_CA, ONCE_TLS_CERT, ONCE_TLS_KEY) name the
  CA this process trusts and its own certificate and key (PEM). The certificate's URI SAN
  spiffe://once/<region>/<role> is who the process is; raft-store members authorise every
  call by it, and a node started with --api-callers routers answers only routers. `once up`
  makes a CA and every certificate; `once certs` does for a deployment. The certificate and
  key are reloaded when their files change. A key file other users may read, or anyone but
  its owner may write (mode looser than 0640), is refused: exit 64.

Public TLS:
  --public-tls-cert and --public-tls-key (or ONCE_PUBLIC_TLS_CERT, ONCE_PUBLIC_TLS_KEY): the
  public listener speaks TLS with this certificate for the API's host name (any CA your
  clients trust; no client certificate asked). Reloaded when the files change.";

#[derive(Debug, Args, Clone, Default)]
pub struct TlsArgs {
    /// The CA certificate (PEM) this process trusts; peers must present a
    /// certificate it signed.
    #[arg(long, env = "ONCE_TLS_CA", global = true, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// This process's certificate (PEM), naming its identity.
    #[arg(long, env = "ONCE_TLS_CERT", global = true, value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// This process's private key (PEM; 0600, or 0440 from a Kubernetes
    /// Secret: a key other users may read or write is refused).
    #[arg(long, env = "ONCE_TLS_KEY", global = true, value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    pub fn files(&self) -> anyhow::Result<Option<TlsFiles>> {
        TlsFiles::from_parts(
            self.tls_ca.clone(),
            self.tls_cert.clone(),
            self.tls_key.clone(),
        )
        .map_err(config_error)
    }

    /// The loaded files, or `None` when none is given; a configuration
    /// error (exit 64) when they do not load, the key file is open to other
    /// users ([`super::key_files`]) or the certificate is not one of
    /// `roles`.
    pub fn load(&self, roles: &[Role]) -> anyhow::Result<Option<Tls>> {
        let Some(files) = self.files()? else {
            return Ok(None);
        };
        super::key_files::refuse_loose("--tls-key", &files.key)?;
        let tls = Tls::load(&files).map_err(config_error)?;
        let identity = tls
            .identity()
            .expect("a loaded certificate names an identity");
        if !roles.contains(&identity.role()) {
            return Err(config_error(anyhow::anyhow!(
                "{} names {identity}; this command needs a {} certificate",
                files.cert.display(),
                roles
                    .iter()
                    .map(|r| r.as_str())
                    .collect::<Vec<_>>()
                    .join(" or ")
            )));
        }
        Ok(Some(tls))
    }
}

/// The public listener's own certificate, for clients (not an identity).
#[derive(Debug, Args, Clone, Default)]
pub struct PublicTlsArgs {
    /// Certificate chain (PEM) the public listener presents: TLS for
    /// clients, who authenticate with their API keys.
    #[arg(
        long,
        env = "ONCE_PUBLIC_TLS_CERT",
        value_name = "PEM",
        requires = "public_tls_key"
    )]
    pub public_tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(
        long,
        env = "ONCE_PUBLIC_TLS_KEY",
        value_name = "PEM",
        requires = "public_tls_cert"
    )]
    pub public_tls_key: Option<PathBuf>,
}

impl PublicTlsArgs {
    /// `Server` TLS with the given pair, or `Plain`; exit 64 when the pair
    /// does not load or the key file is open to other users.
    pub fn load(&self) -> anyhow::Result<PublicTls> {
        match (&self.public_tls_cert, &self.public_tls_key) {
            (Some(cert), Some(key)) => {
                super::key_files::refuse_loose("--public-tls-key", key)?;
                once_tls::public::server_config(cert, key)
                    .map(PublicTls::Server)
                    .map_err(config_error)
            }
            _ => Ok(PublicTls::Plain),
        }
    }
}
