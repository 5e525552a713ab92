//! TLS for a public listener (router, node): the server presents a
//! certificate for the API's host name, issued by whatever CA the clients
//! trust (a public CA, the company's, cert-manager's), and asks for no
//! client certificate — clients authenticate with their API keys, inside
//! the encrypted session. The certificate and key are reloaded when their
//! files change, like an internal identity's ([`crate::reload`]).
//!
//! Unlike the internal links ([`crate::Tls`]), sessions may resume: the
//! server decides nothing by a client certificate, so a resumed session
//! cannot carry a stale identity, and resumption saves a full handshake for
//! clients that reconnect.

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;

use crate::TlsError;
use crate::reload::{self, ReloadingKey};

/// A public listener's server configuration: `cert` (PEM chain, leaf
/// first) and `key` (PEM), polled every [`reload::DEFAULT_POLL`]; HTTP/1.1
/// over ALPN.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = ReloadingKey::start(cert, key, provider.clone(), reload::DEFAULT_POLL)?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(key);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
