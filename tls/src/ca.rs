//! The local certificate authority: makes a CA, reads one back, and issues
//! a certificate per process (its identity as a URI SAN, its listen
//! addresses as DNS and IP SANs, both server and client auth). Private keys
//! are written 0600, every file atomically (a reloading process never reads
//! half a certificate).
//!
//! Nothing it makes lives for ever ([`crate::validity`]): a leaf lasts
//! [`LocalCa::with_leaf_lifetime`] (90 days by default) and never past the
//! CA; the CA lasts its [`CaPolicy::lifetime`]. The CA may sign leaves
//! only (`pathlen:0`: a leaked leaf key cannot mint certificates, and no
//! intermediate can be slipped in), and a [`CaPolicy`] can confine the DNS
//! names and addresses its leaves may carry (X.509 name constraints, which
//! rustls enforces; `once up`'s CA permits `localhost` and 127.0.0.0/8
//! only). Identities are URI SANs, which rcgen cannot constrain: the roles
//! accept only `spiffe://once/<region>/<role>` themselves.

use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    NameConstraints, SanType,
};

use crate::TlsError;
use crate::files::TlsFiles;
use crate::identity::Identity;
use crate::validity::{self, DEFAULT_CA_LIFETIME, DEFAULT_LEAF_LIFETIME, Validity};

/// What a new CA is: its name, how long it lives, and which DNS names and
/// addresses its leaves may carry (none listed: any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaPolicy {
    pub name: String,
    pub lifetime: Duration,
    /// DNS names (and their subdomains) leaves may name.
    pub permitted_dns: Vec<String>,
    /// Address ranges (address, prefix length) leaves may name.
    pub permitted_ips: Vec<(IpAddr, u8)>,
}

impl CaPolicy {
    /// A CA named `name`, [`DEFAULT_CA_LIFETIME`], unconstrained names.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            lifetime: DEFAULT_CA_LIFETIME,
            permitted_dns: Vec::new(),
            permitted_ips: Vec::new(),
        }
    }

    fn name_constraints(&self) -> Option<NameConstraints> {
        if self.permitted_dns.is_empty() && self.permitted_ips.is_empty() {
            return None;
        }
        let dns = self
            .permitted_dns
            .iter()
            .map(|d| GeneralSubtree::DnsName(d.clone()));
        let ips = self.permitted_ips.iter().map(|(ip, prefix)| {
            GeneralSubtree::IpAddress(CidrSubnet::from_addr_prefix(*ip, *prefix))
        });
        Some(NameConstraints {
            permitted_subtrees: dns.chain(ips).collect(),
            excluded_subtrees: Vec::new(),
        })
    }
}

pub use crate::files::CA_CERT_FILE;
/// The CA's private key: only in the CA's directory, 0600.
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// A CA held in a directory: `ca.pem` and `ca-key.pem`.
pub struct LocalCa {
    dir: PathBuf,
    cert_pem: String,
    key: KeyPair,
    /// The CA's own expiry: no leaf is made to outlive it.
    not_after: SystemTime,
    leaf_lifetime: Duration,
}

impl std::fmt::Debug for LocalCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCa")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl LocalCa {
    /// Makes a new CA in `dir` (created if missing) with the default
    /// [`CaPolicy`]. Refuses to replace one already there: every
    /// certificate it issued would stop verifying.
    pub fn create(dir: &Path, name: &str) -> Result<Self, TlsError> {
        Self::create_with(dir, &CaPolicy::new(name))
    }

    /// [`Self::create`] as `policy` says.
    pub fn create_with(dir: &Path, policy: &CaPolicy) -> Result<Self, TlsError> {
        std::fs::create_dir_all(dir).map_err(|e| TlsError::io(dir, e))?;
        if dir.join(CA_KEY_FILE).exists() {
            return Err(TlsError::Exists(dir.join(CA_KEY_FILE)));
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, policy.name.as_str());
        dn.push(DnType::OrganizationName, "once");
        params.distinguished_name = dn;
        // Leaves only: no intermediate below it.
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.name_constraints = policy.name_constraints();
        let validity = Validity::from_now(SystemTime::now(), policy.lifetime, None);
        params.not_before = validity::offset_date_time(validity.not_before);
        params.not_after = validity::offset_date_time(validity.not_after);
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
            not_after: validity.not_after,
            leaf_lifetime: DEFAULT_LEAF_LIFETIME,
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
        let not_after = Validity::of_pem(&cert_pem)
            .map_err(|reason| TlsError::Pem {
                path: dir.join(CA_CERT_FILE),
                reason,
            })?
            .not_after;
        Ok(Self {
            dir: dir.to_owned(),
            cert_pem,
            key,
            not_after,
            leaf_lifetime: DEFAULT_LEAF_LIFETIME,
        })
    }

    /// The same CA, issuing leaves that live `lifetime` (still never past
    /// the CA's own expiry).
    pub fn with_leaf_lifetime(mut self, lifetime: Duration) -> Self {
        self.leaf_lifetime = lifetime;
        self
    }

    /// When the CA itself expires.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
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
        let validity =
            Validity::from_now(SystemTime::now(), self.leaf_lifetime, Some(self.not_after));
        params.not_before = validity::offset_date_time(validity.not_before);
        params.not_after = validity::offset_date_time(validity.not_after);
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

#[cfg(test)]
mod tests {
    use x509_parser::extensions::{GeneralName, ParsedExtension};

    use super::*;
    use crate::identity::Role;

    fn parsed(pem: &str) -> Vec<ParsedExtension<'static>> {
        let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        let der: &'static [u8] = Box::leak(block.contents.into_boxed_slice());
        let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
        cert.extensions()
            .iter()
            .map(|e| e.parsed_extension().clone())
            .collect()
    }

    #[test]
    fn the_ca_signs_leaves_only_within_its_names_and_nothing_outlives_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut policy = CaPolicy::new("test CA");
        policy.lifetime = Duration::from_secs(30 * 24 * 3600);
        policy.permitted_dns = vec!["localhost".into()];
        policy.permitted_ips = vec![("127.0.0.0".parse().unwrap(), 8)];
        let ca = LocalCa::create_with(dir.path(), &policy).unwrap();
        let extensions = parsed(ca.cert_pem());
        assert!(
            extensions.iter().any(|e| matches!(
                e,
                ParsedExtension::BasicConstraints(b) if b.ca && b.path_len_constraint == Some(0)
            )),
            "pathlen:0: {extensions:?}"
        );
        let constraints = extensions
            .iter()
            .find_map(|e| match e {
                ParsedExtension::NameConstraints(n) => Some(n.clone()),
                _ => None,
            })
            .expect("name constraints");
        let permitted = constraints.permitted_subtrees.unwrap();
        assert!(
            permitted
                .iter()
                .any(|s| matches!(s.base, GeneralName::DNSName("localhost")))
        );
        let now = SystemTime::now();
        let ca_validity = Validity::of_pem(ca.cert_pem()).unwrap();
        assert!(ca_validity.not_after <= now + policy.lifetime);

        // A leaf asked to live 90 days lives 90 days, one asked for a year
        // stops with the CA; both already valid a day ago.
        let identity = Identity::new("eu-west", Role::Node).unwrap();
        let leaf = ca.issue(&identity, &[], &[]).unwrap();
        let v = Validity::of_pem(&leaf.cert_pem).unwrap();
        assert!(v.not_after <= SystemTime::now() + DEFAULT_LEAF_LIFETIME.min(policy.lifetime));
        assert!(v.not_before <= now - Duration::from_secs(23 * 3600));
        let ca = LocalCa::open(dir.path())
            .unwrap()
            .with_leaf_lifetime(Duration::from_secs(60));
        let short = Validity::of_pem(&ca.issue(&identity, &[], &[]).unwrap().cert_pem).unwrap();
        assert!(short.not_after <= SystemTime::now() + Duration::from_secs(60));
        assert!(short.not_after > now);
        let leaf_extensions = parsed(&ca.issue(&identity, &[], &[]).unwrap().cert_pem);
        assert!(
            leaf_extensions
                .iter()
                .any(|e| matches!(e, ParsedExtension::BasicConstraints(b) if !b.ca)),
            "a leaf is no CA"
        );
    }
}
