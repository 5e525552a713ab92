//! `once up`'s local CA and a certificate per process, in `DIR/tls/`: the
//! CA in `DIR/tls/ca/` (its key 0600), and `<process>.pem` with
//! `<process>-key.pem` (0600) beside `ca.pem` for every store member,
//! node and the router, plus `operator` — `once up`'s own identity, which
//! the drills and the operator commands use too. Made on the first start
//! and reused on resume; a region added later gets its certificates then.
//! Every child starts with mutual TLS on: a local cluster is as closed as a
//! deployed one (DESIGN §10).
//!
//! Nothing lives for ever. The CA signs leaves only (`pathlen:0`), which
//! may name `localhost` and loopback addresses only (name constraints),
//! and lives five years; every leaf lives `--cert-lifetime` (90 days) and
//! is issued again `--cert-renew-before` (30 days) ahead of its expiry —
//! at start, and by [`keep_renewed`] while the cluster runs. Every process
//! (`once up`'s own operator client too) reloads its files when they
//! change (`once_tls::reload`), so a renewal restarts nothing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use once_tls::ca::CaPolicy;
use once_tls::{Identity, LocalCa, Role, Tls, TlsFiles, Validity};

use super::layout::Layout;

/// The name of `once up`'s own certificate (an operator's).
pub(crate) const OPERATOR: &str = "operator";

/// How long `once up`'s leaf certificates live, and how long before their
/// expiry they are issued again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CertLifetimes {
    pub leaf: Duration,
    pub renew_before: Duration,
}

impl CertLifetimes {
    /// Both as given, once checked: a renewal margin must leave a leaf
    /// some life between renewals.
    pub(crate) fn new(leaf: Duration, renew_before: Duration) -> anyhow::Result<Self> {
        anyhow::ensure!(
            renew_before < leaf,
            "--cert-renew-before ({}) must be shorter than --cert-lifetime ({}): a certificate would be renewed as soon as it is made",
            humantime::format_duration(renew_before),
            humantime::format_duration(leaf)
        );
        anyhow::ensure!(
            leaf >= Duration::from_secs(10),
            "--cert-lifetime must be at least 10s (every process reloads its files every 2s)"
        );
        Ok(Self { leaf, renew_before })
    }

    /// How often the leaves are looked at: a quarter of the margin (so a
    /// renewal is never later than a quarter of it), between a second and
    /// an hour.
    fn check_every(&self) -> Duration {
        (self.renew_before / 4).clamp(Duration::from_secs(1), Duration::from_secs(3600))
    }
}

/// One process's certificate: its file name, identity and addresses.
#[derive(Debug, Clone)]
struct Leaf {
    name: String,
    identity: Identity,
    ips: Vec<IpAddr>,
}

/// Every leaf of the cluster, and how long each lives.
#[derive(Debug)]
struct Leaves {
    dir: PathBuf,
    lifetimes: CertLifetimes,
    leaves: Vec<Leaf>,
}

#[derive(Debug)]
pub(crate) struct Pki {
    dir: PathBuf,
    leaves: Leaves,
    operator: Tls,
    http: reqwest::Client,
}

impl Pki {
    /// Opens (or makes) the CA in `dir`, issues what `layout` lacks and
    /// renews whatever is due.
    pub(crate) fn prepare(
        dir: &Path,
        layout: &Layout,
        lifetimes: CertLifetimes,
    ) -> anyhow::Result<Self> {
        let mut leaves: Vec<Leaf> = Vec::new();
        for r in &layout.regions {
            let store = [r.store_raft, r.store_api, r.store_admin].map(|a| a.ip());
            leaves.push(Leaf {
                name: format!("store-{}", r.name),
                identity: Identity::new(&r.name, Role::StoreMember)?,
                ips: store.to_vec(),
            });
            leaves.push(Leaf {
                name: format!("node-{}", r.name),
                identity: Identity::new(&r.name, Role::Node)?,
                ips: vec![r.node.ip(), r.node_admin.ip()],
            });
        }
        leaves.push(Leaf {
            name: "router".into(),
            identity: Identity::new(&layout.regions[0].name, Role::Router)?,
            ips: vec![layout.router_admin.ip()],
        });
        leaves.push(Leaf {
            name: OPERATOR.into(),
            identity: Identity::new("local", Role::Operator)?,
            ips: vec![],
        });
        for leaf in &mut leaves {
            leaf.ips.sort();
            leaf.ips.dedup();
        }
        let ca_dir = dir.join("ca");
        if !ca_dir.join(once_tls::ca::CA_KEY_FILE).exists() {
            LocalCa::create_with(&ca_dir, &ca_policy(&leaves))
                .with_context(|| format!("making the local CA in {}", ca_dir.display()))?;
        }
        let leaves = Leaves {
            dir: dir.to_owned(),
            lifetimes,
            leaves,
        };
        leaves.renew_due(SystemTime::now())?;
        let operator = Tls::load(&TlsFiles::named(dir, OPERATOR))
            .context("loading once up's operator certificate")?;
        let http = operator
            .http_client()
            .build()
            .context("building the operator's HTTP client")?;
        Ok(Self {
            dir: dir.to_owned(),
            leaves,
            operator,
            http,
        })
    }

    /// Issues every leaf that is missing, or expires within the renewal
    /// margin of `now`; the names of those issued.
    pub(crate) fn renew_due(&self, now: SystemTime) -> anyhow::Result<Vec<String>> {
        self.leaves.renew_due(now)
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
    /// certificate are, for drills and operator commands, and how long
    /// the leaves live.
    pub(crate) fn describe(&self) -> serde_json::Value {
        let operator = self.files(OPERATOR);
        serde_json::json!({
            "ca": operator.ca,
            "operator": { "cert": operator.cert, "key": operator.key },
            "leaf_lifetime_seconds": self.leaves.lifetimes.leaf.as_secs(),
            "renew_before_seconds": self.leaves.lifetimes.renew_before.as_secs(),
        })
    }
}

impl Leaves {
    /// See [`Pki::renew_due`].
    fn renew_due(&self, now: SystemTime) -> anyhow::Result<Vec<String>> {
        let mut issued = Vec::new();
        let mut ca = None;
        for leaf in &self.leaves {
            let files = TlsFiles::named(&self.dir, &leaf.name);
            // Missing, unreadable, within the margin of its expiry, or
            // living longer than a leaf may now (made by an older `once
            // up`, valid until 4096, or before --cert-lifetime was cut).
            let due = !files.exist()
                || Validity::of_file(&files.cert).map_or(true, |v| {
                    let remaining = v.remaining(now);
                    remaining <= self.lifetimes.renew_before || remaining > self.lifetimes.leaf
                });
            if !due {
                continue;
            }
            if ca.is_none() {
                let opened = LocalCa::open(&self.dir.join("ca"))
                    .with_context(|| format!("the local CA in {}", self.dir.display()))?;
                ca = Some(opened.with_leaf_lifetime(self.lifetimes.leaf));
            }
            let ca = ca.as_ref().expect("opened above");
            ca.issue_to(&leaf.identity, &["localhost".to_owned()], &leaf.ips, &files)
                .with_context(|| format!("issuing {}'s certificate", leaf.name))?;
            issued.push(leaf.name.clone());
        }
        Ok(issued)
    }
}

/// A new CA for these leaves: `localhost` and the loopback ranges, plus
/// any other address a leaf carries (a layout listening elsewhere).
fn ca_policy(leaves: &[Leaf]) -> CaPolicy {
    let mut policy = CaPolicy::new("once up local CA");
    policy.permitted_dns = vec!["localhost".to_owned()];
    policy.permitted_ips = vec![
        (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), 8),
        (IpAddr::V6(Ipv6Addr::LOCALHOST), 128),
    ];
    for ip in leaves.iter().flat_map(|l| &l.ips) {
        if !ip.is_loopback() {
            policy
                .permitted_ips
                .push((*ip, if ip.is_ipv4() { 32 } else { 128 }));
        }
    }
    policy
}

/// Renews the leaves as they come due, for as long as `once up` runs.
pub(crate) async fn keep_renewed(pki: Arc<super::Plan>) {
    let pki = &pki.pki;
    let mut tick = tokio::time::interval(pki.leaves.lifetimes.check_every());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match pki.renew_due(SystemTime::now()) {
            Ok(renewed) if renewed.is_empty() => {}
            Ok(renewed) => tracing::info!(?renewed, "certificates renewed before they expire"),
            Err(e) => tracing::error!(error = %format!("{e:#}"), "renewing certificates"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_margin_as_long_as_the_lifetime_is_refused() {
        let day = Duration::from_secs(24 * 3600);
        CertLifetimes::new(90 * day, 30 * day).unwrap();
        let refused = CertLifetimes::new(30 * day, 30 * day).unwrap_err();
        assert!(
            refused.to_string().contains("--cert-renew-before"),
            "{refused}"
        );
        assert!(CertLifetimes::new(Duration::from_secs(5), Duration::from_secs(1)).is_err());
        let short = CertLifetimes::new(Duration::from_secs(60), Duration::from_secs(40)).unwrap();
        assert_eq!(short.check_every(), Duration::from_secs(10));
    }
}
