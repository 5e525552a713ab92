//! The local certificate authority: makes a CA, reads one back, and issues
//! a certificate per process (its identity as a URI SAN, its listen
//! addresses as DNS and IP SANs, both server and client auth). Private keys
//! are written 0600, every file atomically (a reloading process never reads
//! half a certificate).

use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::TlsError;
use crate::files::TlsFiles;
use crate::identity::Identity;

pub use crate::files::CA_CERT_FILE;
/// The CA's private key: only in the CA's directory, 0600.
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// A CA held in a directory: `ca.pem` and `ca-key.pem`.
pub struct LocalCa {
    dir: PathBuf,
    cert_pem: String,
    key: KeyPair,
}

impl std::fmt::Debug for LocalCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCa")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl LocalCa {
    /// Makes a new CA in `dir` (created if missing). Refuses to replace one
    /// already there: every certificate it issued would stop verifying.
    pub fn create(dir: &Path, name: &str) -> Result<Self, TlsError> {
        std::fs::create_dir_all(dir).map_err(|e| TlsError::io(dir, e))?;
        if dir.join(CA_KEY_FILE).exists() {
            return Err(TlsError::Exists(dir.join(CA_KEY_FILE)));
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        dn.push(DnType::OrganizationName, "once");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        let cert_pem = cert.pem();
        write_file(&dir.join(CA_KEY_FILE), &key.serialize_pem(), 0o600)?;
        write_file(&dir.join(CA_CERT_FILE), &cert_pem, 0o644)?;
        Ok(Self {
            dir: dir.to_owned(),
            cert_pem,
            key,
        })
    }

    /// Reads the CA in `dir`.
    pub fn open(dir: &Path) -> Result<Self, TlsError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|e| TlsError::io(&path, e))
        };
        let cert_pem = read(CA_CERT_FILE)?;
        let key = KeyPair::from_pem(&read(CA_KEY_FILE)?)?;
        Ok(Self {
            dir: dir.to_owned(),
            cert_pem,
            key,
        })
    }

    /// The CA in `dir`, made there first if there is none (`once up` on
    /// first start; a resume reuses it).
    pub fn open_or_create(dir: &Path, name: &str) -> Result<Self, TlsError> {
        if dir.join(CA_KEY_FILE).exists() {
            Self::open(dir)
        } else {
            Self::create(dir, name)
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A fresh key and a certificate for `identity`, valid for the given
    /// names and addresses when it serves and as a client.
    pub fn issue(
        &self,
        identity: &Identity,
        dns: &[String],
        ips: &[IpAddr],
    ) -> Result<Issued, TlsError> {
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, &self.key)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, identity.uri());
        params.distinguished_name = dn;
        params.subject_alt_names.push(SanType::URI(
            identity
                .uri()
                .try_into()
                .map_err(|e: rcgen::Error| TlsError::Certificate(e.to_string()))?,
        ));
        for name in dns {
            params.subject_alt_names.push(SanType::DnsName(
                name.clone()
                    .try_into()
                    .map_err(|e: rcgen::Error| TlsError::Certificate(e.to_string()))?,
            ));
        }
        for ip in ips {
            params.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Issued {
            ca_pem: self.cert_pem.clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Issues for `identity` and writes the three files a process loads to
    /// `files` (the CA certificate, its certificate, its key at 0600).
    pub fn issue_to(
        &self,
        identity: &Identity,
        dns: &[String],
        ips: &[IpAddr],
        files: &TlsFiles,
    ) -> Result<(), TlsError> {
        self.issue(identity, dns, ips)?.write(files)
    }
}

/// A certificate and its key, with the CA that signed it, in PEM.
pub struct Issued {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").finish_non_exhaustive()
    }
}

impl Issued {
    /// Writes the key first (0600), then the certificate: a process that
    /// reloads on the certificate's change finds the matching key there.
    pub fn write(&self, files: &TlsFiles) -> Result<(), TlsError> {
        for path in [&files.ca, &files.cert, &files.key] {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| TlsError::io(parent, e))?;
            }
        }
        write_file(&files.key, &self.key_pem, 0o600)?;
        write_file(&files.cert, &self.cert_pem, 0o644)?;
        if std::fs::read_to_string(&files.ca).ok().as_deref() != Some(self.ca_pem.as_str()) {
            write_file(&files.ca, &self.ca_pem, 0o644)?;
        }
        Ok(())
    }
}

/// Writes `contents` to a temporary file with `mode`, then renames it over
/// `path`.
fn write_file(path: &Path, contents: &str, mode: u32) -> Result<(), TlsError> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| TlsError::io(&tmp, e))?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| TlsError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| TlsError::io(path, e))
}
