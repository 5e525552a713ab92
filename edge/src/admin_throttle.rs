//! Failed admin authentications, slowed per peer: a peer may present a
//! wrong admin token [`FailedAdminAuth::BURST`] times at once, then one
//! more every [`FailedAdminAuth::INTERVAL`]; past that, every admin request
//! from it — right token or not — is answered `429` with `Retry-After`
//! until its allowance has come back. Refusing the right token too is the
//! point: a limiter that answered a correct guess with `200` while
//! refusing wrong ones would tell a guesser when it had won, at full speed.
//!
//! Unthrottled, a node answered about 4,750 guesses a second (issue 48);
//! throttled, a peer gets about 86,000 a day. The allowance is a GCRA
//! (one "theoretical arrival time" per peer, as `governor` keeps), keyed by
//! the peer's IP address — its /64 for IPv6, where one host holds many —
//! and forgotten once it has fully come back, so the table holds only
//! peers that failed within the last `BURST × INTERVAL`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::peers::peer_key as key;

/// Who failed recently, and how much allowance each has left.
#[derive(Debug, Default)]
pub struct FailedAdminAuth {
    /// Per peer: when its allowance is whole again (GCRA's TAT).
    whole_at: Mutex<HashMap<IpAddr, Instant>>,
}

impl FailedAdminAuth {
    /// Wrong tokens a peer may present at once.
    pub const BURST: u32 = 10;
    /// How often a peer regains one wrong attempt.
    pub const INTERVAL: Duration = Duration::from_secs(1);

    /// `Err(wait)` when `peer` has used its allowance: refuse it for
    /// `wait`, whatever it presents.
    pub fn admit(&self, peer: IpAddr, now: Instant) -> Result<(), Duration> {
        let table = self.whole_at.lock().unwrap_or_else(|e| e.into_inner());
        let Some(&whole_at) = table.get(&key(peer)) else {
            return Ok(());
        };
        // Full once `whole_at - now` no longer leaves room for one more
        // failure within the burst.
        let budget = Self::INTERVAL * Self::BURST;
        let owed = whole_at.saturating_duration_since(now);
        if owed + Self::INTERVAL > budget {
            Err(owed + Self::INTERVAL - budget)
        } else {
            Ok(())
        }
    }

    /// Counts one wrong token from `peer`.
    pub fn failed(&self, peer: IpAddr, now: Instant) {
        let mut table = self.whole_at.lock().unwrap_or_else(|e| e.into_inner());
        if table.len() >= 1024 {
            // Forget whoever has fully recovered; only recent failures stay.
            table.retain(|_, whole_at| *whole_at > now);
        }
        let whole_at = table.entry(key(peer)).or_insert(now);
        *whole_at = (*whole_at).max(now) + Self::INTERVAL;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 5));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 6));

    #[test]
    fn a_burst_of_failures_then_one_a_second_and_only_for_that_peer() {
        let throttle = FailedAdminAuth::default();
        let t0 = Instant::now();
        for _ in 0..FailedAdminAuth::BURST {
            assert_eq!(throttle.admit(A, t0), Ok(()));
            throttle.failed(A, t0);
        }
        let wait = throttle.admit(A, t0).unwrap_err();
        assert_eq!(wait, FailedAdminAuth::INTERVAL);
        assert_eq!(throttle.admit(B, t0), Ok(()), "another peer is not slowed");
        // A second later, one more attempt; then refused again.
        let t1 = t0 + FailedAdminAuth::INTERVAL;
        assert_eq!(throttle.admit(A, t1), Ok(()));
        throttle.failed(A, t1);
        assert!(throttle.admit(A, t1).is_err());
        // Ten quiet seconds later the whole burst is back.
        let later = t1 + FailedAdminAuth::INTERVAL * FailedAdminAuth::BURST;
        for _ in 0..FailedAdminAuth::BURST {
            assert_eq!(throttle.admit(A, later), Ok(()));
            throttle.failed(A, later);
        }
        assert!(throttle.admit(A, later).is_err());
    }

    #[test]
    fn recovered_peers_are_forgotten() {
        let throttle = FailedAdminAuth::default();
        let t0 = Instant::now();
        for i in 0..1024u32 {
            throttle.failed(IpAddr::V4(i.into()), t0);
        }
        throttle.failed(A, t0 + Duration::from_secs(5));
        assert_eq!(throttle.whole_at.lock().unwrap().len(), 1);
    }
}
