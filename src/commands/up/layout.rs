//! Where everything of a local cluster lives: region names, the ports each
//! process listens on and the files it keeps, chosen on the first `once up`
//! and read back by every later one (raft-store membership names its
//! members' addresses, so a resumed cluster must reuse them).
//!
//! Ports are chosen outside the kernel's ephemeral range
//! (`/proc/sys/net/ipv4/ip_local_port_range`). A port found by binding port
//! 0 comes from that range, and between choosing it and the child binding
//! it — seconds later, or after a restart — the kernel may hand it to any
//! other process's listener or outgoing connection. A port outside the
//! range is only ever taken by someone who asks for it by number, so
//! checking that nobody holds it when it is chosen is enough.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Region names for `--regions N`; beyond these, `region-<n>`.
const REGION_NAMES: &[&str] = &["eu-west", "us-east", "ap-south"];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionLayout {
    pub name: String,
    pub store_id: u64,
    pub store_raft: SocketAddr,
    pub store_api: SocketAddr,
    pub node: SocketAddr,
    /// Admin listeners (added later: a layout written before them gets
    /// ports on its next start).
    #[serde(default = "unset")]
    pub store_admin: SocketAddr,
    #[serde(default = "unset")]
    pub node_admin: SocketAddr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub regions: Vec<RegionLayout>,
    /// The router's admin listener.
    #[serde(default = "unset")]
    pub router_admin: SocketAddr,
}

/// A port not chosen yet.
fn unset() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
}

/// Where the kernel documents its ephemeral range, and what it is when
/// that cannot be read (Linux's default).
const EPHEMERAL_RANGE_FILE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
const DEFAULT_EPHEMERAL: RangeInclusive<u16> = 32768..=60999;
/// Below this, ports belong to well-known and commonly configured services.
const LOWEST_PORT: u16 = 10_000;

/// The ports the kernel hands out for port 0 and outgoing connections.
fn ephemeral_range() -> RangeInclusive<u16> {
    std::fs::read_to_string(EPHEMERAL_RANGE_FILE)
        .ok()
        .and_then(|text| parse_port_range(&text))
        .unwrap_or(DEFAULT_EPHEMERAL)
}

/// `"32768\t60999\n"` → `32768..=60999`.
fn parse_port_range(text: &str) -> Option<RangeInclusive<u16>> {
    let mut bounds = text.split_whitespace().map(str::parse::<u16>);
    let (low, high) = (bounds.next()?.ok()?, bounds.next()?.ok()?);
    (low <= high).then_some(low..=high)
}

/// The ports worth choosing from: from [`LOWEST_PORT`] up to the ephemeral
/// range, and above it.
fn ports_outside(ephemeral: &RangeInclusive<u16>) -> Vec<RangeInclusive<u16>> {
    let mut spans = Vec::new();
    if *ephemeral.start() > LOWEST_PORT {
        spans.push(LOWEST_PORT..=ephemeral.start() - 1);
    }
    if *ephemeral.end() < u16::MAX {
        spans.push((ephemeral.end() + 1).max(LOWEST_PORT)..=u16::MAX);
    }
    spans
}

/// Chooses local ports outside the ephemeral range, each free when chosen
/// and none chosen twice.
struct PortPicker {
    spans: Vec<RangeInclusive<u16>>,
    chosen: BTreeSet<u16>,
}

impl PortPicker {
    /// Never choosing a port of `taken` (the router's `--listen`).
    fn new(ephemeral: &RangeInclusive<u16>, taken: &[u16]) -> anyhow::Result<Self> {
        let spans = ports_outside(ephemeral);
        anyhow::ensure!(
            !spans.is_empty(),
            "the kernel's ephemeral port range {}-{} leaves no port above {LOWEST_PORT} to choose",
            ephemeral.start(),
            ephemeral.end()
        );
        Ok(Self {
            spans,
            chosen: taken.iter().copied().collect(),
        })
    }

    fn next_addr(&mut self) -> anyhow::Result<SocketAddr> {
        let total: u32 = self
            .spans
            .iter()
            .map(|s| u32::from(s.end() - s.start()) + 1)
            .sum();
        // Random, so two clusters started at once rarely try the same port;
        // a port someone holds is simply passed over.
        for _ in 0..1000 {
            let mut n = rand::random_range(0..total);
            let port = self
                .spans
                .iter()
                .find_map(|span| {
                    let len = u32::from(span.end() - span.start()) + 1;
                    if n < len {
                        u16::try_from(u32::from(*span.start()) + n).ok()
                    } else {
                        n -= len;
                        None
                    }
                })
                .expect("n is below the spans' total");
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            if !self.chosen.contains(&port) && TcpListener::bind(addr).is_ok() {
                self.chosen.insert(port);
                return Ok(addr);
            }
        }
        anyhow::bail!("no free local port outside the kernel's ephemeral range after 1000 tries")
    }
}

fn region_name(i: usize) -> String {
    REGION_NAMES
        .get(i)
        .map_or_else(|| format!("region-{}", i + 1), |n| (*n).to_owned())
}

impl Layout {
    fn path(dir: &Path) -> PathBuf {
        dir.join("layout.json")
    }

    /// The layout kept in `dir`, or a new one for `regions` regions whose
    /// ports are none of `taken`.
    pub fn load_or_create(dir: &Path, regions: usize, taken: &[u16]) -> anyhow::Result<Self> {
        let path = Self::path(dir);
        if let Ok(bytes) = std::fs::read(&path) {
            let mut layout: Layout = serde_json::from_slice(&bytes)
                .with_context(|| format!("reading {}", path.display()))?;
            if layout.fill_unset(taken)? {
                std::fs::write(&path, serde_json::to_vec_pretty(&layout)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            anyhow::ensure!(
                layout.regions.len() == regions,
                "{} holds a cluster of {} regions; start it with --regions {} or use another --dir",
                dir.display(),
                layout.regions.len(),
                layout.regions.len()
            );
            return Ok(layout);
        }
        let layout = Self::new(regions, &ephemeral_range(), taken)?;
        std::fs::write(&path, serde_json::to_vec_pretty(&layout)?)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(layout)
    }

    /// A new layout of `regions` regions, its ports outside `ephemeral`
    /// and none of `taken`.
    /// Chooses ports for listeners an older layout did not have; whether
    /// it chose any.
    fn fill_unset(&mut self, taken: &[u16]) -> anyhow::Result<bool> {
        let mut held: Vec<u16> = taken.to_vec();
        held.push(self.router_admin.port());
        for r in &self.regions {
            held.extend(
                [
                    r.store_raft,
                    r.store_api,
                    r.node,
                    r.store_admin,
                    r.node_admin,
                ]
                .map(|a| a.port()),
            );
        }
        let mut ports = PortPicker::new(&ephemeral_range(), &held)?;
        let mut filled = false;
        let slots = std::iter::once(&mut self.router_admin).chain(
            self.regions
                .iter_mut()
                .flat_map(|r| [&mut r.store_admin, &mut r.node_admin]),
        );
        for slot in slots {
            if *slot == unset() {
                *slot = ports.next_addr()?;
                filled = true;
            }
        }
        Ok(filled)
    }

    fn new(regions: usize, ephemeral: &RangeInclusive<u16>, taken: &[u16]) -> anyhow::Result<Self> {
        let mut ports = PortPicker::new(ephemeral, taken)?;
        Ok(Layout {
            router_admin: ports.next_addr()?,
            regions: (0..regions)
                .map(|i| {
                    Ok(RegionLayout {
                        name: region_name(i),
                        store_id: i as u64 + 1,
                        store_raft: ports.next_addr()?,
                        store_api: ports.next_addr()?,
                        node: ports.next_addr()?,
                        store_admin: ports.next_addr()?,
                        node_admin: ports.next_addr()?,
                    })
                })
                .collect::<anyhow::Result<_>>()?,
        })
    }

    /// `id=raft address` of every member, for `once store --peers`.
    pub fn peers(&self) -> String {
        self.regions
            .iter()
            .map(|r| format!("{}={}", r.store_id, r.store_raft))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `id=region` of every member, for `once store --peer-regions`.
    pub fn peer_regions(&self) -> String {
        self.regions
            .iter()
            .map(|r| format!("{}={}", r.store_id, r.name))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Store client endpoints as seen from `region`: its own member first.
    pub fn store_endpoints_from(&self, region: &RegionLayout) -> Vec<String> {
        std::iter::once(region)
            .chain(self.regions.iter().filter(|r| r.name != region.name))
            .map(|r| format!("https://{}", r.store_api))
            .collect()
    }

    /// `region=url` of every node, for `once router --nodes`.
    pub fn nodes(&self) -> String {
        self.regions
            .iter()
            .map(|r| format!("{}=https://{}", r.name, r.node))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every address a child of this layout listens on.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        std::iter::once(self.router_admin)
            .chain(self.regions.iter().flat_map(|r| {
                [
                    r.store_raft,
                    r.store_api,
                    r.node,
                    r.store_admin,
                    r.node_admin,
                ]
            }))
            .collect()
    }

    /// Fails, naming the address, if anything already listens where a
    /// child of this layout (or the router, on `listen`) will: a child that
    /// cannot bind exits, and a readiness probe would otherwise be
    /// answered by the stranger holding its port.
    pub fn ensure_free(&self, listen: SocketAddr) -> anyhow::Result<()> {
        for address in std::iter::once(listen).chain(self.addresses()) {
            std::net::TcpListener::bind(address).with_context(|| {
                format!("{address} is in use: another process listens where once up would")
            })?;
        }
        Ok(())
    }

    /// The router's `--node-admins`: each region's node admin listener.
    pub fn node_admins(&self) -> String {
        self.regions
            .iter()
            .map(|r| format!("{}=http://{}", r.name, r.node_admin))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Layout {
        fn ports(&self) -> Vec<u16> {
            self.addresses().iter().map(SocketAddr::port).collect()
        }
    }

    #[test]
    fn a_port_someone_else_holds_is_named_before_anything_starts() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::load_or_create(dir.path(), 2, &[]).unwrap();
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let listen = free.local_addr().unwrap();
        drop(free);
        layout.ensure_free(listen).unwrap();
        let stranger = std::net::TcpListener::bind(layout.regions[1].node).unwrap();
        let error = format!("{:#}", layout.ensure_free(listen).unwrap_err());
        assert!(
            error.contains(&layout.regions[1].node.to_string()),
            "{error}"
        );
        drop(stranger);
        let router = std::net::TcpListener::bind(listen).unwrap();
        assert!(layout.ensure_free(listen).is_err());
        drop(router);
    }

    #[test]
    fn a_layout_is_kept_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = Layout::load_or_create(dir.path(), 3, &[]).unwrap();
        assert_eq!(
            first
                .regions
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>(),
            ["eu-west", "us-east", "ap-south"]
        );
        let again = Layout::load_or_create(dir.path(), 3, &[]).unwrap();
        assert_eq!(first, again);
        assert!(Layout::load_or_create(dir.path(), 2, &[]).is_err());
        let from_us = first.store_endpoints_from(&first.regions[1]);
        assert_eq!(
            from_us[0],
            format!("https://{}", first.regions[1].store_api)
        );
        assert_eq!(from_us.len(), 3);
    }

    #[test]
    fn a_new_layouts_ports_are_distinct_and_never_ones_the_kernel_hands_out() {
        let ephemeral = ephemeral_range();
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::load_or_create(dir.path(), 7, &[]).unwrap();
        let ports = layout.ports();
        // Five listeners a region, and the router's admin listener.
        assert_eq!(ports.iter().collect::<BTreeSet<_>>().len(), 36, "{ports:?}");
        for port in ports {
            assert!(!ephemeral.contains(&port), "{port} in {ephemeral:?}");
            assert!(port >= LOWEST_PORT, "{port}");
        }
    }

    #[test]
    fn the_routers_port_is_never_given_to_a_region() {
        // Seven ports outside the range, the router holds one of them.
        let layout = Layout::new(1, &(10_007..=u16::MAX), &[10_001]).unwrap();
        let mut ports = layout.ports();
        ports.sort_unstable();
        assert_eq!(ports, [10_000, 10_002, 10_003, 10_004, 10_005, 10_006]);
    }

    #[test]
    fn with_an_ephemeral_range_from_low_ports_are_chosen_above_it() {
        let layout = Layout::new(3, &(1024..=60999), &[]).unwrap();
        assert!(layout.ports().iter().all(|p| *p > 60999), "{layout:?}");
    }

    #[test]
    fn an_ephemeral_range_covering_every_port_leaves_nothing_to_choose() {
        assert!(Layout::new(1, &(1024..=u16::MAX), &[]).is_err());
    }

    #[test]
    fn the_kernels_range_file_is_read_as_it_is_written() {
        assert_eq!(parse_port_range("32768\t60999\n"), Some(32768..=60999));
        assert_eq!(parse_port_range("60999 32768"), None);
        assert_eq!(parse_port_range(""), None);
    }
}
