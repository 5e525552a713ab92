//! A process's certificate and key, swapped in place when their files
//! change: the server side answers new handshakes with the new certificate
//! ([`ResolvesServerCert`]), the client side presents it on new connections
//! ([`ResolvesClientCert`]), and nothing restarts. A background thread
//! polls the files' modification times; a change that does not load (a key
//! that does not match, half a rotation) is logged and the old pair kept.
//!
//! The CA is not reloaded: trusting a new CA is a rollout of its own
//! (issue from it, ship it beside the old one, then drop the old).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime};

use rustls::SignatureScheme;
use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::TlsError;
use crate::files;
use crate::identity::Identity;

/// How often the files are looked at by default.
pub const DEFAULT_POLL: Duration = Duration::from_secs(2);

/// The current certificate and key, with the identity the certificate names.
pub struct ReloadingKey {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Current>,
}

struct Current {
    key: Arc<CertifiedKey>,
    identity: Option<Identity>,
    stamps: (Option<SystemTime>, Option<SystemTime>),
}

impl std::fmt::Debug for ReloadingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingKey")
            .field("cert", &self.cert)
            .field("identity", &self.identity())
            .finish_non_exhaustive()
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl ReloadingKey {
    /// Loads the certificate (chain) and key now and polls them every
    /// `poll` for as long as the returned value lives.
    pub fn start(
        cert: &Path,
        key: &Path,
        provider: Arc<CryptoProvider>,
        poll: Duration,
    ) -> Result<Arc<Self>, TlsError> {
        let current = load(cert, key, &provider)?;
        let this = Arc::new(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            provider,
            current: RwLock::new(current),
        });
        let weak = Arc::downgrade(&this);
        std::thread::Builder::new()
            .name("tls-reload".into())
            .spawn(move || watch(weak, poll))
            .map_err(|e| TlsError::io(Path::new("tls-reload thread"), e))?;
        Ok(this)
    }

    /// The identity the current certificate names.
    pub fn identity(&self) -> Option<Identity> {
        self.read().identity.clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Current> {
        self.current.read().unwrap_or_else(|p| p.into_inner())
    }

    fn key(&self) -> Arc<CertifiedKey> {
        self.read().key.clone()
    }

    /// Loads the files again if either changed since the last load; `true`
    /// when a new pair is in place.
    pub fn reload_if_changed(&self) -> bool {
        let stamps = (modified(&self.cert), modified(&self.key));
        if self.read().stamps == stamps {
            return false;
        }
        match load(&self.cert, &self.key, &self.provider) {
            Ok(next) => {
                tracing::info!(
                    cert = %self.cert.display(),
                    identity = ?next.identity.as_ref().map(Identity::uri),
                    "TLS certificate reloaded"
                );
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = next;
                true
            }
            Err(e) => {
                tracing::warn!(
                    cert = %self.cert.display(),
                    error = %e,
                    "the TLS certificate changed but does not load; keeping the previous one"
                );
                // Not again until the files change again.
                self.current
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .stamps = stamps;
                false
            }
        }
    }
}

fn load(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<Current, TlsError> {
    let stamps = (modified(cert), modified(key));
    let chain = files::certificates(cert)?;
    let identity = Identity::of_certificate(&chain[0]);
    let key = CertifiedKey::from_der(chain, files::private_key(key)?, provider)?;
    Ok(Current {
        key: Arc::new(key),
        identity,
        stamps,
    })
}

fn watch(key: Weak<ReloadingKey>, poll: Duration) {
    loop {
        std::thread::sleep(poll);
        match key.upgrade() {
            Some(key) => {
                key.reload_if_changed();
            }
            None => return,
        }
    }
}

impl ResolvesServerCert for ReloadingKey {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.key())
    }
}

impl ResolvesClientCert for ReloadingKey {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.key())
    }

    fn has_certs(&self) -> bool {
        true
    }
}
