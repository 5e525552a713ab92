//! `once up`'s local CA and a certificate per process, in `DIR/tls/`: the
//! CA in `DIR/tls/ca/` (its key 0600), and `<process>.pem` with
//! `<process>-key.pem` (0600) beside `ca.pem` for every store member,
//! node and the router, plus `operator` — `once up`'s own identity, which
//! the drills and the operator commands use too. Made on the first start
//! and reused on resume; a region added later gets its certificates then.
//! Every child starts with mutual TLS on: a local cluster is as closed as a
//! deployed one (DESIGN §10).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use once_tls::{Identity, LocalCa, Role, Tls, TlsFiles};

use super::layout::Layout;

/// The name of `once up`'s own certificate (an operator's).
pub(crate) const OPERATOR: &str = "operator";

#[derive(Debug)]
pub(crate) struct Pki {
    dir: PathBuf,
    operator: Tls,
    http: reqwest::Client,
}

impl Pki {
    /// Opens (or makes) the CA in `dir` and issues what `layout` lacks.
    pub(crate) fn prepare(dir: &Path, layout: &Layout) -> anyhow::Result<Self> {
        let ca = LocalCa::open_or_create(&dir.join("ca"), "once up local CA")
            .with_context(|| format!("the local CA in {}", dir.display()))?;
        let mut wanted: Vec<(String, Identity, Vec<IpAddr>)> = Vec::new();
        for r in &layout.regions {
            let store = [r.store_raft, r.store_api, r.store_admin].map(|a| a.ip());
            wanted.push((
                format!("store-{}", r.name),
                Identity::new(&r.name, Role::StoreMember)?,
                store.to_vec(),
            ));
            wanted.push((
                format!("node-{}", r.name),
                Identity::new(&r.name, Role::Node)?,
                vec![r.node.ip(), r.node_admin.ip()],
            ));
        }
        wanted.push((
            "router".into(),
            Identity::new(&layout.regions[0].name, Role::Router)?,
            vec![layout.router_admin.ip()],
        ));
        wanted.push((
            OPERATOR.into(),
            Identity::new("local", Role::Operator)?,
            vec![],
        ));
        for (name, identity, mut ips) in wanted {
            let files = TlsFiles::named(dir, &name);
            if files.exist() {
                continue;
            }
            ips.sort();
            ips.dedup();
            ca.issue_to(&identity, &["localhost".to_owned()], &ips, &files)
                .with_context(|| format!("issuing {name}'s certificate"))?;
        }
        let operator = Tls::load(&TlsFiles::named(dir, OPERATOR))
            .context("loading once up's operator certificate")?;
        let http = operator
            .http_client()
            .build()
            .context("building the operator's HTTP client")?;
        Ok(Self {
            dir: dir.to_owned(),
            operator,
            http,
        })
    }

    pub(crate) fn files(&self, name: &str) -> TlsFiles {
        TlsFiles::named(&self.dir, name)
    }

    /// `--tls-ca`, `--tls-cert`, `--tls-key` of process `name`.
    pub(crate) fn flags(&self, name: &str) -> Vec<String> {
        self.files(name).flags()
    }

    /// `once up`'s own identity.
    pub(crate) fn operator(&self) -> &Tls {
        &self.operator
    }

    /// An HTTP client presenting the operator's certificate.
    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// What `cluster.json` says of it: where the CA and the operator's
    /// certificate are, for drills and operator commands.
    pub(crate) fn describe(&self) -> serde_json::Value {
        let operator = self.files(OPERATOR);
        serde_json::json!({
            "ca": operator.ca,
            "operator": { "cert": operator.cert, "key": operator.key },
        })
    }
}
