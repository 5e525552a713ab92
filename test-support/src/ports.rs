//! Ports a test chooses itself, all below the kernel's ephemeral range: no
//! other test's port-0 listener or outgoing connection can be handed one of
//! them between the choice and its use (a child process binds it seconds
//! later, and again after a restart; a closed port must stay closed).

use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener};
use std::sync::{LazyLock, Mutex};

/// Every port this test process has handed out. Free-now is not enough: two
/// tests running side by side could draw the same free port, and the second
/// process to bind it would fail ("Address already in use").
static HANDED_OUT: LazyLock<Mutex<HashSet<u16>>> = LazyLock::new(Mutex::default);

/// A port free on every address in `ips` now, outside the ephemeral range,
/// and never handed out before by this process.
pub fn port_outside_ephemeral_range(ips: &[&str]) -> u16 {
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768)
        .max(10_001);
    loop {
        let port = rand::random_range(10_000..ephemeral_start);
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
        if !handed_out.contains(&port)
            && ips.iter().all(|ip| TcpListener::bind((*ip, port)).is_ok())
        {
            handed_out.insert(port);
            return port;
        }
    }
}

/// An address on 127.0.0.1 where nothing listens: connections to it are
/// refused (an unreachable store, a region whose node is down).
pub fn closed_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port_outside_ephemeral_range(&["127.0.0.1"])))
}
