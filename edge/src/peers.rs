//! Who holds how much of one listener: its open connections and requests
//! in flight, in total and per peer, and whether it is near its cap.
//!
//! A listener-wide cap alone lets one peer take all of it: 4,096
//! connections from one address, each sending `GET /healthz` every 25 s,
//! refused every other client of a router (issue 48). So each peer — its
//! IPv4 address, its IPv6 /64, as [`peer_key`] says — may hold at most a
//! share of the connections ([`crate::ServerLimits::connections_per_peer`],
//! a quarter of the cap by default) and of the requests in flight; past
//! it, its new connection is closed at once and its next request shed,
//! while other peers are served.
//!
//! Many peers together can still fill the listener. Near the cap (open
//! connections at [`PRESSED_AT`] of it) the listener is *pressed*: every
//! connection's watchdog is told at once, and kept-alive connections idle
//! for more than [`PRESSED_IDLE`] are closed first — a connection kept by a
//! trickle of requests is idle nearly all the time, so it is the one that
//! goes, and a new client gets its slot. Envoy's overload manager does the
//! same (`reduce_timeouts` on idle connections). The pressure lifts once
//! the listener is back under [`CALM_AT`] of its cap.
//!
//! What no listener can do alone — tell apart a thousand addresses of one
//! attacker, rate-limit new connections per source — is the ingress's
//! (`deploy/README.md`, "Edge limits").

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::limits::ServerLimits;

/// The share of the connection cap at which a listener is pressed.
pub const PRESSED_AT: (usize, usize) = (7, 8);
/// The share under which it is calm again (below [`PRESSED_AT`], so a
/// listener at the threshold does not flap).
pub const CALM_AT: (usize, usize) = (3, 4);
/// The idle time after which a pressed listener closes a kept-alive
/// connection (the configured idle timeout if shorter).
pub const PRESSED_IDLE: Duration = Duration::from_secs(1);

/// The peer as per-peer bounds count it: its IPv4 address (an IPv4-mapped
/// IPv6 address is the IPv4 one), its IPv6 /64, where one host holds many.
pub fn peer_key(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut octets = v6.octets();
                octets[8..].fill(0);
                IpAddr::V6(octets.into())
            }
        },
    }
}

/// Why a connection was closed on accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The listener holds its `--max-connections`.
    ListenerCap,
    /// This peer holds its `--max-connections-per-peer`.
    PeerCap,
}

impl Refused {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ListenerCap => "listener_cap",
            Self::PeerCap => "peer_cap",
        }
    }
}

/// One listener's occupancy. Shared by its accept loop and every
/// connection's [`Seat`].
#[derive(Debug)]
pub struct Occupancy {
    max_connections: usize,
    per_peer_connections: usize,
    per_peer_in_flight: usize,
    pressed_at: usize,
    calm_at: usize,
    held: Mutex<Held>,
    pressed: watch::Sender<bool>,
}

#[derive(Debug, Default)]
struct Held {
    open: usize,
    /// Only peers with a connection open: an entry goes with its last one.
    peers: HashMap<IpAddr, Arc<PeerShare>>,
}

/// What one peer holds. Its connection count changes under [`Held`]'s
/// lock, on accept and close; its requests in flight with one atomic per
/// request, no lock.
#[derive(Debug, Default)]
struct PeerShare {
    connections: AtomicUsize,
    in_flight: AtomicUsize,
}

impl Occupancy {
    pub fn new(limits: &ServerLimits) -> Arc<Self> {
        let max = limits.max_connections;
        let share = |(num, den): (usize, usize)| (max * num).div_ceil(den).max(1);
        Arc::new(Self {
            max_connections: max,
            per_peer_connections: limits.connections_per_peer(),
            per_peer_in_flight: limits.in_flight_per_peer(),
            pressed_at: share(PRESSED_AT),
            calm_at: share(CALM_AT),
            held: Mutex::new(Held::default()),
            pressed: watch::channel(false).0,
        })
    }

    /// A seat for a connection from `peer` (`None`: its address is
    /// unknown, and only the listener's cap applies), or why not.
    pub fn admit(self: &Arc<Self>, peer: Option<IpAddr>) -> Result<Seat, Refused> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.open >= self.max_connections {
            return Err(Refused::ListenerCap);
        }
        let share = match peer {
            None => None,
            Some(ip) => {
                let key = peer_key(ip);
                let share = held.peers.entry(key).or_default().clone();
                if share.connections.load(Ordering::Relaxed) >= self.per_peer_connections {
                    return Err(Refused::PeerCap);
                }
                share.connections.fetch_add(1, Ordering::Relaxed);
                Some((key, share))
            }
        };
        held.open += 1;
        if held.open >= self.pressed_at {
            self.pressed
                .send_if_modified(|p| !std::mem::replace(p, true));
        }
        Ok(Seat {
            occupancy: self.clone(),
            share,
        })
    }

    /// Tells when the listener becomes pressed or calm again.
    pub fn pressure(&self) -> watch::Receiver<bool> {
        self.pressed.subscribe()
    }

    /// Open connections now.
    pub fn open(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).open
    }

    fn release(&self, share: Option<&(IpAddr, Arc<PeerShare>)>) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.open -= 1;
        if let Some(share) = share {
            Self::leave_share(&mut held, share);
        }
        if held.open < self.calm_at {
            self.pressed
                .send_if_modified(|p| std::mem::replace(p, false));
        }
    }

    /// One connection of a peer counted no more against its share; the
    /// entry goes with its last one.
    fn leave_share(held: &mut Held, (key, share): &(IpAddr, Arc<PeerShare>)) {
        if share.connections.fetch_sub(1, Ordering::Relaxed) == 1 {
            held.peers.remove(key);
        }
    }
}

/// One connection's place in its listener's [`Occupancy`], given back
/// when the connection closes.
#[derive(Debug)]
pub struct Seat {
    occupancy: Arc<Occupancy>,
    share: Option<(IpAddr, Arc<PeerShare>)>,
}

impl Seat {
    /// The connection's peer proved a role of the CA (its client
    /// certificate): from now on the connection counts against the
    /// listener's cap only. Every process of a role on one machine shares
    /// one address (`once up`: every member, node and router is 127.0.0.1),
    /// and a node's public listener sees only its region's routers, so an
    /// address's share would cap the cluster's own traffic. Before the
    /// handshake, within its timeout, the address's share holds: a flood
    /// without a certificate is still bounded per address.
    pub fn authenticated(&mut self) {
        if let Some(share) = self.share.take() {
            let mut held = self
                .occupancy
                .held
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            Occupancy::leave_share(&mut held, &share);
        }
    }

    /// Counts one request of this connection's peer, or `None` when the
    /// peer already has its share in flight (shed it).
    pub fn start_request(&self) -> Option<InFlight> {
        let Some((_, share)) = &self.share else {
            return Some(InFlight(None));
        };
        if share.in_flight.fetch_add(1, Ordering::AcqRel) >= self.occupancy.per_peer_in_flight {
            share.in_flight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(InFlight(Some(share.clone())))
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.occupancy.release(self.share.as_ref());
    }
}

/// One request in flight of a peer, counted until dropped.
#[derive(Debug)]
pub struct InFlight(Option<Arc<PeerShare>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(share) = &self.0 {
            share.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 5));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 6));

    fn limits(max_connections: usize, per_peer: usize, in_flight: usize) -> ServerLimits {
        ServerLimits {
            max_connections,
            max_connections_per_peer: Some(per_peer),
            max_in_flight: in_flight * 4,
            max_in_flight_per_peer: Some(in_flight),
            ..ServerLimits::default()
        }
    }

    #[test]
    fn a_peer_gets_its_share_and_another_peer_still_gets_in() {
        let occupancy = Occupancy::new(&limits(8, 3, 1));
        let a: Vec<_> = (0..3).map(|_| occupancy.admit(Some(A)).unwrap()).collect();
        assert_eq!(occupancy.admit(Some(A)).unwrap_err(), Refused::PeerCap);
        let b = occupancy.admit(Some(B)).unwrap();
        assert_eq!(occupancy.open(), 4);
        drop(a);
        // A's entry went with its last connection; B's stays.
        assert_eq!(occupancy.held.lock().unwrap().peers.len(), 1);
        drop(b);
        assert!(occupancy.held.lock().unwrap().peers.is_empty());
    }

    #[test]
    fn an_authenticated_role_peer_leaves_its_addresss_share_but_not_the_cap() {
        let occupancy = Occupancy::new(&limits(4, 2, 1));
        let mut members: Vec<_> = (0..2).map(|_| occupancy.admit(Some(A)).unwrap()).collect();
        assert_eq!(occupancy.admit(Some(A)).unwrap_err(), Refused::PeerCap);
        for member in &mut members {
            member.authenticated();
        }
        members.push(occupancy.admit(Some(A)).unwrap());
        members.push(occupancy.admit(Some(A)).unwrap());
        assert_eq!(occupancy.admit(Some(A)).unwrap_err(), Refused::ListenerCap);
        let requests: Vec<_> = (0..3)
            .map(|_| {
                members[0]
                    .start_request()
                    .expect("no in-flight share either")
            })
            .collect();
        drop(requests);
        drop(members);
        assert_eq!(occupancy.open(), 0);
        assert!(occupancy.held.lock().unwrap().peers.is_empty());
    }

    #[test]
    fn the_listener_cap_holds_across_peers_and_a_closed_seat_is_given_back() {
        let occupancy = Occupancy::new(&limits(2, 2, 1));
        let first = occupancy.admit(Some(A)).unwrap();
        let _second = occupancy.admit(None).unwrap();
        assert_eq!(occupancy.admit(Some(B)).unwrap_err(), Refused::ListenerCap);
        drop(first);
        assert!(occupancy.admit(Some(B)).is_ok());
    }

    #[test]
    fn requests_in_flight_are_bounded_per_peer_not_per_connection() {
        let occupancy = Occupancy::new(&limits(8, 4, 2));
        let (one, two) = (
            occupancy.admit(Some(A)).unwrap(),
            occupancy.admit(Some(A)).unwrap(),
        );
        let r1 = one.start_request().unwrap();
        let _r2 = two.start_request().unwrap();
        assert!(one.start_request().is_none(), "A's third request in flight");
        let b = occupancy.admit(Some(B)).unwrap();
        assert!(b.start_request().is_some(), "B has its own share");
        drop(r1);
        assert!(
            two.start_request().is_some(),
            "a finished request frees its place"
        );
    }

    #[test]
    fn pressed_near_the_cap_and_calm_again_well_under_it() {
        let occupancy = Occupancy::new(&limits(8, 8, 1));
        let pressure = occupancy.pressure();
        let mut seats: Vec<_> = (0..6).map(|_| occupancy.admit(Some(A)).unwrap()).collect();
        assert!(!*pressure.borrow(), "6 of 8 is not near the cap");
        seats.push(occupancy.admit(Some(A)).unwrap());
        assert!(*pressure.borrow(), "7 of 8 is");
        seats.pop();
        assert!(*pressure.borrow(), "6 of 8 is not yet calm");
        seats.pop();
        assert!(!*pressure.borrow(), "5 of 8 is");
    }

    #[test]
    fn an_ipv6_host_is_its_64_and_a_mapped_ipv4_is_the_ipv4() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_eq!(peer_key(a), peer_key(b));
        assert_ne!(peer_key(a), peer_key("2001:db8:1:3::1".parse().unwrap()));
        assert_eq!(peer_key("::ffff:10.0.0.5".parse().unwrap()), A);
    }
}
