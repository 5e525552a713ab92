//! The rustls configurations of a process holding a certificate: a server
//! side that requires a client certificate chained to the CA, and a client
//! side that presents its certificate and trusts only the CA.
//!
//! The client checks the server's chain to the CA and that the certificate
//! names an identity; it does not insist that the certificate lists the host
//! name or address dialled (a member listening on `0.0.0.0`, reached through
//! a proxy or a load balancer, is still the member its certificate names).
//! As with SPIFFE, what authorises is the identity, and each server checks
//! its callers' identities itself.
//!
//! Session resumption is off on both sides: a resumed TLS 1.3 session
//! carries the certificate of the handshake it resumes, so a client whose
//! certificate was reissued (another identity, or one past a rotation)
//! would go on being seen as the old one. Connections are pooled and kept
//! alive, so full handshakes are rare.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig};

use crate::TlsError;
use crate::files::{self, TlsFiles};
use crate::identity::Identity;
use crate::reload::{self, ReloadingKey};

/// A process's trust (the CA) and its own reloading certificate. Cheap to
/// clone; every clone shares the one reloading pair.
#[derive(Clone)]
pub struct Tls {
    key: Arc<ReloadingKey>,
    server: Arc<ServerConfig>,
    /// The same, letting a client without a certificate finish the
    /// handshake (a certificate it does present must chain to the CA).
    server_anonymous: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("identity", &self.identity())
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Loads the three files, polling the certificate and key for changes
    /// every [`reload::DEFAULT_POLL`].
    pub fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        Self::load_polling(files, reload::DEFAULT_POLL)
    }

    pub fn load_polling(files: &TlsFiles, poll: Duration) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for ca in files::certificates(&files.ca)? {
            roots.add(ca)?;
        }
        let key = ReloadingKey::start(&files.cert, &files.key, provider.clone(), poll)?;
        if key.identity().is_none() {
            return Err(TlsError::NoIdentity(files.cert.clone()));
        }
        let roots = Arc::new(roots);
        let server = server_config(&roots, &provider, &key, true)?;
        let server_anonymous = server_config(&roots, &provider, &key, false)?;
        let client = Arc::new(client_config(&roots, &provider, &key)?);
        Ok(Self {
            key,
            server,
            server_anonymous,
            client,
        })
    }

    /// Who this process is, per its current certificate.
    pub fn identity(&self) -> Option<Identity> {
        self.key.identity()
    }

    /// The reloading pair (tests force a reload instead of waiting a poll).
    pub fn key(&self) -> &Arc<ReloadingKey> {
        &self.key
    }

    /// A server that refuses any client without a certificate chained to
    /// the CA.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server.clone()
    }

    /// A server where a client without a certificate completes the
    /// handshake and is served as no identity (a certificate of another CA
    /// is still refused): for a listener with a route nobody needs an
    /// identity for, such as the health probes a kubelet makes, which
    /// present no certificate. The handlers must refuse everything else to
    /// a request without an identity.
    pub fn server_config_anonymous_allowed(&self) -> Arc<ServerConfig> {
        self.server_anonymous.clone()
    }

    /// A client that presents this process's certificate and trusts only
    /// servers whose certificate chains to the CA and names an identity.
    pub fn client_config(&self) -> ClientConfig {
        (*self.client).clone()
    }

    /// A `reqwest` client builder speaking this mutual TLS to `https://`
    /// URLs; the caller adds its timeouts (and `https_only` where every
    /// peer must be TLS) and builds.
    pub fn http_client(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder().use_preconfigured_tls(self.client_config())
    }
}

fn server_config(
    roots: &Arc<RootCertStore>,
    provider: &Arc<CryptoProvider>,
    key: &Arc<ReloadingKey>,
    require_client_certificate: bool,
) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
    let builder = if require_client_certificate {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    let verifier = builder
        .build()
        .map_err(|e| TlsError::Certificate(e.to_string()))?;
    let mut config = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(key.clone());
    // No resumption (module docs): every session verifies its certificate.
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

fn client_config(
    roots: &Arc<RootCertStore>,
    provider: &Arc<CryptoProvider>,
    key: &Arc<ReloadingKey>,
) -> Result<ClientConfig, TlsError> {
    let inner = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .map_err(|e| TlsError::Certificate(e.to_string()))?;
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(IdentityVerifier { inner }))
        .with_client_cert_resolver(key.clone());
    // No resumption (module docs): a reissued certificate is presented on
    // the next connection.
    config.resumption = rustls::client::Resumption::disabled();
    Ok(config)
}

/// The CA's chain check, with the identity in place of the host name.
#[derive(Debug)]
struct IdentityVerifier {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for IdentityVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        let named_identity = || {
            if Identity::of_certificate(end_entity).is_some() {
                Ok(ServerCertVerified::assertion())
            } else {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::ApplicationVerificationFailure,
                ))
            }
        };
        match verified {
            Ok(_) => named_identity(),
            // webpki checks the name last: the chain to the CA is good.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => named_identity(),
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
