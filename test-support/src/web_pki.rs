//! A CA of the kind a client trusts for a server's host name — a public
//! listener (`--public-tls-cert`) or a database — as opposed to `once`'s
//! own identities ([`crate::pki`]): a CA, and server certificates it signs
//! for given names.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A server's certificate and key, in PEM.
#[derive(Debug, Clone)]
pub struct ServerTls {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A CA: its certificate (PEM) and what signs with it.
pub struct WebCa {
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for WebCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebCa").finish_non_exhaustive()
    }
}

impl WebCa {
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("a self-signed CA");
        Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for `names` (host names or IP addresses, as
    /// given) and nothing else.
    pub fn server(&self, names: &[&str]) -> ServerTls {
        let key = KeyPair::generate().expect("a server key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("server parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().map_or("server", |n| n));
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("a signed server certificate");
        ServerTls {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}
