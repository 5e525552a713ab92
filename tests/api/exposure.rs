//! What the Kubernetes manifests expose beyond their own cluster: only the
//! store's peer load balancer, and only on the private interconnect. In
//! every region overlay, every `LoadBalancer` Service asks each major cloud
//! for an internal load balancer, and admits exactly the other regions'
//! ranges — the same ranges the store's NetworkPolicy admits from other
//! regions, all private, the base's placeholder replaced. A Service made
//! public by a missing annotation or an open source range fails here, not
//! in a cloud account.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde_json::Value;

use crate::deploy::{OVERLAYS, array_at, kubectl_available, render, str_at};

/// Each cloud's way of asking for an internal load balancer.
const INTERNAL_LB: &[(&str, &str)] = &[
    (
        "service.beta.kubernetes.io/aws-load-balancer-scheme",
        "internal",
    ),
    (
        "service.beta.kubernetes.io/aws-load-balancer-internal",
        "true",
    ),
    ("networking.gke.io/load-balancer-type", "Internal"),
    (
        "service.beta.kubernetes.io/azure-load-balancer-internal",
        "true",
    ),
];

/// The base's placeholder range (TEST-NET-1): an overlay that forgot to
/// replace it admits nobody, which must not pass either.
const PLACEHOLDER: &str = "192.0.2.0/24";

/// Whether `cidr` lies inside RFC 1918 private space.
fn is_private(cidr: &str) -> bool {
    let Some((address, prefix)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(address), Ok(prefix)) = (address.parse::<Ipv4Addr>(), prefix.parse::<u8>()) else {
        return false;
    };
    let [a, b, ..] = address.octets();
    match (a, b) {
        (10, _) => prefix >= 8,
        (172, 16..=31) => prefix >= 12,
        (192, 168) => prefix >= 16,
        _ => false,
    }
}

/// The ranges the store's NetworkPolicy admits from other regions (the
/// rule that opens the Raft port to ipBlocks).
fn store_peer_ranges(objects: &[Value]) -> BTreeSet<String> {
    let policy = objects
        .iter()
        .find(|o| {
            str_at(o, "/kind") == Some("NetworkPolicy")
                && str_at(o, "/metadata/name") == Some("once-store")
        })
        .expect("the once-store NetworkPolicy");
    array_at(policy, "/spec/ingress")
        .iter()
        .filter(|rule| {
            array_at(rule, "/ports")
                .iter()
                .any(|p| p.get("port").and_then(Value::as_u64) == Some(7001))
        })
        .flat_map(|rule| array_at(rule, "/from"))
        .filter_map(|peer| str_at(peer, "/ipBlock/cidr"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn load_balancers_are_internal_and_admit_the_other_regions_only() {
    if !kubectl_available() {
        return;
    }
    for overlay in OVERLAYS {
        let objects = render(overlay);
        let balancers: Vec<&Value> = objects
            .iter()
            .filter(|o| {
                str_at(o, "/kind") == Some("Service")
                    && str_at(o, "/spec/type") == Some("LoadBalancer")
            })
            .collect();
        let names: Vec<&str> = balancers
            .iter()
            .filter_map(|s| str_at(s, "/metadata/name"))
            .collect();
        assert_eq!(
            names,
            ["once-store-peer"],
            "{overlay}: the store's peer Service is the only load balancer"
        );
        let peers = store_peer_ranges(&objects);
        assert!(
            !peers.is_empty(),
            "{overlay}: the store admits no peer range"
        );

        for service in balancers {
            for (annotation, value) in INTERNAL_LB {
                let pointer = format!("/metadata/annotations/{}", annotation.replace('/', "~1"));
                assert_eq!(
                    str_at(service, &pointer),
                    Some(*value),
                    "{overlay}: once-store-peer must carry {annotation}: {value}"
                );
            }
            let sources: BTreeSet<String> = array_at(service, "/spec/loadBalancerSourceRanges")
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            assert!(
                !sources.contains(PLACEHOLDER),
                "{overlay}: loadBalancerSourceRanges still holds the base's placeholder"
            );
            for range in &sources {
                assert!(
                    is_private(range),
                    "{overlay}: {range} is not a private range"
                );
            }
            assert_eq!(
                sources, peers,
                "{overlay}: the load balancer must admit exactly the ranges the store's NetworkPolicy admits from other regions"
            );
        }
    }
}

#[test]
fn private_ranges_are_told_apart_from_public_ones() {
    assert!(is_private("10.20.0.0/16"));
    assert!(is_private("172.16.0.0/12"));
    assert!(is_private("192.168.4.0/24"));
    assert!(!is_private("0.0.0.0/0"));
    assert!(!is_private("10.0.0.0/7"));
    assert!(!is_private("172.32.0.0/16"));
    assert!(!is_private(PLACEHOLDER));
    assert!(!is_private("8.8.8.0/24"));
    assert!(!is_private("not a range"));
}
