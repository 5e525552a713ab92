//! Which addresses a webhook may be delivered to (decision 0102): a
//! merchant's endpoint is on the public internet, so by default no
//! delivery reaches this node's own network — loopback, private ranges,
//! link-local (the cloud metadata service at 169.254.169.254), carrier-grade
//! NAT, multicast and the reserved blocks. A tenant who registers
//! `http://10.0.0.7/` or a name that resolves there would otherwise make
//! the node POST into the cluster's network on its behalf (server-side
//! request forgery).
//!
//! Two checks, because either alone is not enough:
//!
//! - at registration ([`refused_host`]): an IP literal or a `localhost`
//!   name that is not public is refused with `422`, so the mistake shows at
//!   once;
//! - at every attempt: the dispatcher's HTTP client resolves names through
//!   [`PublicOnly`], which drops every non-public address, so a name that
//!   resolved publicly at registration and points inward later (DNS
//!   rebinding) reaches nothing; a literal is checked again before sending.
//!
//! `--webhook-allow-private-targets` turns both off, for a development
//! cluster whose receivers run beside it (`once up`, the tests).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Whether a delivery may connect to `ip`.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0 // "this network"
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || (a == 100 && (b & 0xc0) == 64) // shared address space, 100.64.0.0/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || ip.is_documentation()
        || (a == 198 && (b & 0xfe) == 18) // benchmarking, 198.18.0.0/15
        || ip.is_multicast()
        || a >= 240) // reserved and broadcast
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_unique_local()
        || ip.is_unicast_link_local()
        || ip.is_multicast()
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated, still routed inward)
        || (first == 0x2001 && ip.segments()[1] == 0x0db8) // documentation
        || ip.segments()[..4] == [0x0100, 0, 0, 0]) // discard-only
}

/// The IPv4 address an IPv6 one stands for: mapped (`::ffff:a.b.c.d`),
/// compatible, or NAT64 (`64:ff9b::a.b.c.d`), each judged as that address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let tail = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || (s[..6] == [0; 6] && !ip.is_loopback()) {
        return (!ip.is_unspecified()).then_some(tail);
    }
    None
}

/// Why a URL's host may not receive webhooks, as the refusal's message;
/// `None` when it may (a DNS name is judged again at each attempt).
pub fn refused_host(url: &url::Url) -> Option<String> {
    match url.host()? {
        url::Host::Ipv4(v4) if !is_public_v4(v4) => Some(format!(
            "url: {v4} is not a public address; webhooks are delivered to the public internet only"
        )),
        url::Host::Ipv6(v6) if !is_public(IpAddr::V6(v6)) => Some(format!(
            "url: {v6} is not a public address; webhooks are delivered to the public internet only"
        )),
        url::Host::Domain(name) if is_localhost(name) => Some(format!(
            "url: {name:?} names this machine; webhooks are delivered to the public internet only"
        )),
        _ => None,
    }
}

/// `localhost` and every name under it (RFC 6761 §6.3).
fn is_localhost(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// The dispatcher's resolver: the system's, minus every address
/// [`is_public`] refuses. A name left with none fails the attempt with a
/// message saying so (recorded as the delivery's last error, retried on
/// the schedule like any unreachable endpoint).
#[derive(Debug, Default)]
pub struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| is_public(a.ip()))
                .collect();
            if public.is_empty() {
                return Err(format!(
                    "{host:?} resolves to no public address ({} refused by the webhook target guard)",
                    found.len()
                )
                .into());
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn inward_addresses_are_refused_and_public_ones_pass() {
        for inward in [
            "127.0.0.1",
            "127.5.6.7",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "192.0.0.8",
            "192.0.2.1",
            "198.18.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "::10.0.0.1",
        ] {
            assert!(!is_public(ip(inward)), "{inward} must be refused");
        }
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "198.20.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(is_public(ip(public)), "{public} must pass");
        }
    }

    #[test]
    fn a_registered_url_naming_this_network_is_refused_and_a_public_name_is_not() {
        let refused = |u: &str| refused_host(&url::Url::parse(u).unwrap());
        for inward in [
            "http://127.0.0.1:8080/hook",
            "http://2130706433/hook", // 127.0.0.1 as one number
            "http://0x7f.1/hook",
            "https://169.254.169.254/latest/meta-data",
            "http://10.0.0.7/",
            "http://[::1]/",
            "http://[::ffff:10.0.0.1]/",
            "http://localhost:9000/",
            "http://LOCALHOST./",
            "http://api.localhost/",
        ] {
            assert!(refused(inward).is_some(), "{inward} must be refused");
        }
        for public in [
            "https://m.example/hook",
            "https://8.8.8.8/",
            "https://localhost.example/",
        ] {
            assert_eq!(refused(public), None, "{public}");
        }
    }

    #[tokio::test]
    async fn a_name_resolving_only_inward_resolves_to_nothing() {
        let error = match PublicOnly.resolve("localhost".parse().unwrap()).await {
            Ok(addrs) => panic!("resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(e) => e.to_string(),
        };
        assert!(error.contains("no public address"), "{error}");
    }
}
