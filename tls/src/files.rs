//! Where a process's three TLS files are, and reading them.

use std::path::{Path, PathBuf};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::TlsError;

/// The CA certificate's file name, under the CA's directory and in every
/// issued one.
pub const CA_CERT_FILE: &str = "ca.pem";

/// The CA certificate a process trusts, and its own certificate and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// The flags that hand these files to a role: `--tls-ca`, `--tls-cert`,
    /// `--tls-key`.
    pub fn flags(&self) -> Vec<String> {
        vec![
            "--tls-ca".into(),
            self.ca.display().to_string(),
            "--tls-cert".into(),
            self.cert.display().to_string(),
            "--tls-key".into(),
            self.key.display().to_string(),
        ]
    }

    /// `ca.pem`, `cert.pem` and `key.pem` in `dir`: what `once certs issue
    /// --out DIR` writes and a Kubernetes Secret mounts.
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        }
    }

    /// `<name>.pem` and `<name>-key.pem` beside `ca.pem` in `dir`: one
    /// directory of a process per certificate (`once up`'s `DIR/tls/`).
    pub fn named(dir: &Path, name: &str) -> Self {
        Self {
            ca: dir.join(CA_CERT_FILE),
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}-key.pem")),
        }
    }

    /// All three, or none: `Some` when every path is given.
    pub fn from_parts(
        ca: Option<PathBuf>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> Result<Option<Self>, TlsError> {
        match (ca, cert, key) {
            (Some(ca), Some(cert), Some(key)) => Ok(Some(Self { ca, cert, key })),
            (None, None, None) => Ok(None),
            _ => Err(TlsError::Incomplete),
        }
    }

    pub fn exist(&self) -> bool {
        self.ca.exists() && self.cert.exists() && self.key.exists()
    }
}

pub(crate) fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::pem(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::pem(path, e))?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_owned(),
            reason: "no certificate in the file".into(),
        });
    }
    Ok(certs)
}

pub(crate) fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::pem(path, e))
}
