//! Wall-clock time as the node sees it. Leases, replay windows and metadata
//! retention are all judged against this clock; tests swap in a
//! [`ManualClock`] so that "24 hours later" is a method call, not a sleep.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch: the one time representation stored in
/// every table, so SQLite and PostgreSQL compare times the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnixMillis(pub i64);

impl UnixMillis {
    pub fn plus(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }

    pub fn minus(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }

    /// Time left from `self` until `later`, zero if `later` has passed.
    pub fn until(self, later: UnixMillis) -> Duration {
        Duration::from_millis(u64::try_from(later.0 - self.0).unwrap_or(0))
    }
}

impl fmt::Display for UnixMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

pub trait Clock: Send + Sync + fmt::Debug + 'static {
    fn now(&self) -> UnixMillis;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UnixMillis {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        UnixMillis(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
    }
}

/// A clock the test moves. Cloning shares the same time.
///
/// [`Self::starting_now`] only moves when told to. [`Self::following_real_time`]
/// runs with the wall clock, moved ahead by every [`Self::advance`]: what a
/// node beside raft-store needs in the tests, where the store's leader
/// stamps its own (also moved) clock and the node's must keep up with it.
#[derive(Debug, Clone)]
pub struct ManualClock {
    /// The time (frozen), or the shift from the wall clock (running).
    at: Arc<AtomicI64>,
    running: bool,
}

impl ManualClock {
    pub fn starting_now() -> Self {
        Self {
            at: Arc::new(AtomicI64::new(SystemClock.now().0)),
            running: false,
        }
    }

    pub fn following_real_time() -> Self {
        Self {
            at: Arc::new(AtomicI64::new(0)),
            running: true,
        }
    }

    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.at.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> UnixMillis {
        let at = self.at.load(Ordering::SeqCst);
        if self.running {
            UnixMillis(SystemClock.now().0.saturating_add(at))
        } else {
            UnixMillis(at)
        }
    }
}
