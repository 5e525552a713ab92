//! Which nodes the router could not connect to lately, so a request for a
//! node known down is answered at once instead of dialled.
//!
//! A forward that cannot connect (refused, connect timeout, failed
//! handshake) sent nothing, so nothing can have happened; but dialling a
//! paused or vanished node costs every request up to the connect timeout,
//! a socket and a handshake, and a region's clients retry. On a starved
//! machine that retry storm alone kept the router from answering its own
//! probes (RELIABILITY.md, finding 17). Finagle's *fail fast* is the
//! pattern, with Envoy's ejection backoff:
//!
//! ```text
//!          `after` connects failed in a row       backoff passed: one request probes
//! reachable ───────────────► unreachable(backoff) ─────────────────────────────► probing
//!     ▲                           ▲   (requests skip the node)                      │
//!     │   any answer, or a        └──────── probe failed to connect: backoff ×2 ────┤
//!     └── health check answered ◄─────────── probe connected ───────────────────────┘
//! ```
//!
//! A node is skipped once [`FailFast::after`] connections to it failed in a
//! row with none made in between (a slow handshake on a loaded machine
//! fails one connection, not all). The backoff starts at
//! [`FailFast::first`] and doubles to
//! [`FailFast::longest`]. While a node is unreachable exactly one request
//! at a time dials it (the probe); a probe abandoned midway (its client
//! went away) frees the slot for the next request. The router's health
//! check dials every node each round regardless and clears the mark on any
//! answer, so a node that comes back is used again within a round.
//!
//! Nothing here decides where a tenant lives: a region whose every node is
//! unreachable answers `503` with a `Retry-After` of the time left, and
//! moving its tenants is the health check's job ([`crate::health`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When a node counts as refusing, and how long it is skipped then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailFast {
    /// Connections that failed in a row, none made in between, before the
    /// node is skipped: one slow handshake on a loaded machine is not a
    /// dead node (Envoy ejects after 5 gateway failures in a row).
    pub after: u32,
    /// How long it is skipped then.
    pub first: Duration,
    /// The most, however many probes failed in a row.
    pub longest: Duration,
}

impl Default for FailFast {
    fn default() -> Self {
        Self {
            after: 3,
            first: Duration::from_millis(500),
            longest: Duration::from_secs(5),
        }
    }
}

/// Whether a request may dial a node now.
#[derive(Debug)]
pub enum Admission {
    /// The node is reachable as far as the router knows.
    Dial,
    /// The node was unreachable and its backoff passed: this request finds
    /// out. Report what happened through [`Reachability::connected`] or
    /// [`Reachability::refused`]; dropping the probe unreported lets the
    /// next request probe instead.
    Probe(Probe),
    /// Skip it: its backoff has `retry_in` to run, or another request is
    /// probing it (then `retry_in` is its current backoff: a node that has
    /// refused longer asks clients to stay away longer).
    Skip { retry_in: Duration },
}

/// The one request dialling an unreachable node.
#[derive(Debug)]
pub struct Probe {
    node: Arc<Mutex<NodeState>>,
}

impl Drop for Probe {
    fn drop(&mut self) {
        lock(&self.node).probing = false;
    }
}

#[derive(Debug, Default)]
struct NodeState {
    /// `None` while reachable.
    down: Option<Down>,
    /// While reachable: connections failed in a row since one was made.
    failing: u32,
    probing: bool,
}

#[derive(Debug, Clone, Copy)]
struct Down {
    /// Failed connections in a row.
    failures: u32,
    retry_at: Instant,
}

/// What changed when a connection attempt was reported, for the caller's
/// log line and metrics.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    Unchanged,
    /// Reachable until now; skipped for `backoff`.
    WentDown {
        backoff: Duration,
    },
    /// Unreachable until now.
    CameBack,
}

/// Every configured node's reachability, by base URL. The set of nodes is
/// fixed at start (`--nodes`), so the map itself is never written.
#[derive(Debug)]
pub struct Reachability {
    policy: FailFast,
    nodes: HashMap<String, Arc<Mutex<NodeState>>>,
}

fn lock(node: &Mutex<NodeState>) -> std::sync::MutexGuard<'_, NodeState> {
    // The state is a few fields set together; a panic cannot leave it torn.
    node.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Reachability {
    pub fn new<'a>(policy: FailFast, urls: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            policy,
            nodes: urls
                .into_iter()
                .map(|url| (url.to_owned(), Arc::default()))
                .collect(),
        }
    }

    /// May a request dial `url` at `now`? A node the router was not
    /// configured with is always dialled.
    pub fn admit(&self, url: &str, now: Instant) -> Admission {
        let Some(node) = self.nodes.get(url) else {
            return Admission::Dial;
        };
        let mut state = lock(node);
        let Some(down) = state.down else {
            return Admission::Dial;
        };
        if state.probing {
            // The probe's outcome is not known yet; the longer the node
            // has been refusing, the longer clients are told to stay away.
            return Admission::Skip {
                retry_in: self.backoff(down.failures),
            };
        }
        if now < down.retry_at {
            return Admission::Skip {
                retry_in: down.retry_at - now,
            };
        }
        state.probing = true;
        Admission::Probe(Probe { node: node.clone() })
    }

    /// A connection to `url` was made (whatever the answer).
    pub fn connected(&self, url: &str) -> Change {
        let Some(node) = self.nodes.get(url) else {
            return Change::Unchanged;
        };
        let mut state = lock(node);
        state.failing = 0;
        match state.down.take() {
            Some(down) => {
                tracing::info!(
                    node = url,
                    failed_connections = down.failures,
                    "node reachable again"
                );
                Change::CameBack
            }
            None => Change::Unchanged,
        }
    }

    /// A connection to `url` could not be made at `now`.
    pub fn refused(&self, url: &str, now: Instant) -> Change {
        let Some(node) = self.nodes.get(url) else {
            return Change::Unchanged;
        };
        let mut state = lock(node);
        if state.down.is_none() {
            state.failing = state.failing.saturating_add(1);
            if state.failing < self.policy.after {
                return Change::Unchanged;
            }
        }
        let failures = state.down.map_or(0, |d| d.failures).saturating_add(1);
        let backoff = self.backoff(failures);
        let was_up = state.down.is_none();
        state.down = Some(Down {
            failures,
            retry_at: now + backoff,
        });
        if was_up {
            tracing::warn!(
                node = url,
                backoff_ms = backoff.as_millis() as u64,
                "node refused a connection; requests for it fail fast until a probe or a health check reaches it"
            );
            Change::WentDown { backoff }
        } else {
            Change::Unchanged
        }
    }

    /// What one attempt to reach `url` says of it: any answer means it
    /// takes connections, a connection that could not be made counts
    /// against it, any other failure (a timeout after connecting) says
    /// nothing about connecting. Forwards and health checks report here.
    pub fn record<T>(&self, url: &str, attempt: &Result<T, reqwest::Error>) {
        match attempt {
            Ok(_) => {
                self.connected(url);
            }
            Err(e) if e.is_connect() => {
                self.refused(url, Instant::now());
            }
            Err(_) => {}
        }
    }

    /// Nodes skipped now.
    #[cfg(test)]
    fn unreachable(&self) -> usize {
        self.nodes
            .values()
            .filter(|n| lock(n).down.is_some())
            .count()
    }

    fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        self.policy
            .first
            .saturating_mul(1 << doublings)
            .min(self.policy.longest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = "https://node-a";

    fn reachability() -> Reachability {
        Reachability::new(
            FailFast {
                after: 1,
                first: Duration::from_millis(100),
                longest: Duration::from_millis(350),
            },
            [NODE],
        )
    }

    fn skipped_for(admission: Admission) -> Duration {
        match admission {
            Admission::Skip { retry_in } => retry_in,
            other => panic!("expected a skip, got {other:?}"),
        }
    }

    #[test]
    fn a_node_that_refused_is_skipped_until_its_backoff_passes_then_probed_by_one_request() {
        let r = reachability();
        let t0 = Instant::now();
        assert!(matches!(r.admit(NODE, t0), Admission::Dial));
        assert_eq!(
            r.refused(NODE, t0),
            Change::WentDown {
                backoff: Duration::from_millis(100)
            }
        );
        assert_eq!(r.unreachable(), 1);
        let in_40 = t0 + Duration::from_millis(40);
        assert_eq!(skipped_for(r.admit(NODE, in_40)), Duration::from_millis(60));

        let later = t0 + Duration::from_millis(100);
        let Admission::Probe(probe) = r.admit(NODE, later) else {
            panic!("the first request after the backoff probes");
        };
        // While it dials, everyone else still fails fast, told its backoff.
        assert_eq!(
            skipped_for(r.admit(NODE, later)),
            Duration::from_millis(100)
        );
        assert_eq!(r.connected(NODE), Change::CameBack);
        drop(probe);
        assert!(matches!(r.admit(NODE, later), Admission::Dial));
        assert_eq!(r.unreachable(), 0);
    }

    #[test]
    fn failed_probes_double_the_backoff_up_to_the_longest() {
        let r = reachability();
        let mut now = Instant::now();
        r.refused(NODE, now);
        for expected in [200, 350, 350] {
            now += Duration::from_secs(1);
            let Admission::Probe(probe) = r.admit(NODE, now) else {
                panic!("backoff passed: probe");
            };
            assert_eq!(r.refused(NODE, now), Change::Unchanged);
            drop(probe);
            assert_eq!(
                skipped_for(r.admit(NODE, now)),
                Duration::from_millis(expected)
            );
        }
    }

    #[test]
    fn an_abandoned_probe_lets_the_next_request_probe() {
        let r = reachability();
        let t0 = Instant::now();
        r.refused(NODE, t0);
        let later = t0 + Duration::from_secs(1);
        let Admission::Probe(probe) = r.admit(NODE, later) else {
            panic!("probe");
        };
        drop(probe); // the client went away before the connect finished
        assert!(matches!(r.admit(NODE, later), Admission::Probe(_)));
    }

    #[test]
    fn an_answer_from_the_health_check_brings_a_node_back_before_its_backoff_ends() {
        let r = reachability();
        let t0 = Instant::now();
        r.refused(NODE, t0);
        assert_eq!(r.connected(NODE), Change::CameBack);
        assert!(matches!(r.admit(NODE, t0), Admission::Dial));
        assert!(matches!(r.admit("https://unknown", t0), Admission::Dial));
    }

    #[test]
    fn a_node_is_skipped_only_after_connections_failed_in_a_row_with_none_made_between() {
        let r = Reachability::new(
            FailFast {
                after: 3,
                ..FailFast::default()
            },
            [NODE],
        );
        let now = Instant::now();
        r.refused(NODE, now);
        r.refused(NODE, now);
        assert_eq!(r.connected(NODE), Change::Unchanged, "still reachable");
        r.refused(NODE, now);
        r.refused(NODE, now);
        assert!(
            matches!(r.admit(NODE, now), Admission::Dial),
            "two in a row since the last one made"
        );
        assert!(matches!(r.refused(NODE, now), Change::WentDown { .. }));
        skipped_for(r.admit(NODE, now));
    }
}
