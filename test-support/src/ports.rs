//! Ports a test chooses itself, all below the kernel's ephemeral range: no
//! other test's port-0 listener or outgoing connection can be handed one of
//! them between the choice and its use (a child process binds it seconds
//! later, and again after a restart; a closed port must stay closed).

use std::net::{SocketAddr, TcpListener};

/// A port free on every address in `ips` now, outside the ephemeral range.
pub fn port_outside_ephemeral_range(ips: &[&str]) -> u16 {
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768)
        .max(10_001);
    loop {
        let port = rand::random_range(10_000..ephemeral_start);
        if ips.iter().all(|ip| TcpListener::bind((*ip, port)).is_ok()) {
            return port;
        }
    }
}

/// An address on 127.0.0.1 where nothing listens: connections to it are
/// refused (an unreachable store, a region whose node is down).
pub fn closed_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port_outside_ephemeral_range(&["127.0.0.1"])))
}
