//! A CA of a test's own and certificates for the processes it starts, as
//! `once up` makes them: every internal link of a test cluster is mutual
//! TLS, as in production. Lives in the test's temp dir.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use once_tls::{Identity, LocalCa, Role, Tls, TlsFiles};

/// A test's CA in `dir/ca`, issuing into `dir`.
#[derive(Debug)]
pub struct TestPki {
    dir: PathBuf,
    ca: LocalCa,
}

impl TestPki {
    /// A fresh CA in `dir` (created if missing).
    pub fn new(dir: &Path) -> Self {
        let ca = LocalCa::create(&dir.join("ca"), "once test CA").expect("a test CA");
        Self {
            dir: dir.to_owned(),
            ca,
        }
    }

    /// Issues `name`'s certificate for `role` in `region`, valid for `ips`
    /// (and `localhost`); its files.
    pub fn issue(&self, name: &str, region: &str, role: Role, ips: &[IpAddr]) -> TlsFiles {
        let files = TlsFiles::named(&self.dir, name);
        let identity = Identity::new(region, role).expect("a valid test identity");
        self.ca
            .issue_to(&identity, &["localhost".to_owned()], ips, &files)
            .expect("a test certificate");
        files
    }

    /// Issues and loads: a client or server configuration for `role`.
    pub fn tls(&self, name: &str, region: &str, role: Role) -> Tls {
        let files = self.issue(name, region, role, &[]);
        Tls::load(&files).expect("a test certificate loads")
    }
}
