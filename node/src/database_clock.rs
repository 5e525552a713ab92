//! The regional PostgreSQL's clock as the node's time (DESIGN §5, decision
//! 0035). In the `sql` mode every node of a region judges leases, replay
//! windows and expiry against times it writes into the shared database; a
//! node whose own clock is hours off would expire or take over other
//! nodes' records early. So a node on PostgreSQL reads the database's
//! clock (`clock_timestamp()`) at start and every [`RESAMPLE`], and in
//! between carries the last reading forward on its monotonic clock: a jump
//! of its wall clock changes nothing, and every node of the region agrees
//! to within a round trip to the database.
//!
//! SQLite is embedded: one node, its clock is the database's. Tests that
//! move time give the node a clock of their own and get no
//! `DatabaseClock`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use crate::domain::{Clock, SystemClock, UnixMillis};
use anyhow::Context;
use sqlx::AnyPool;

/// How often the database's clock is read again.
pub const RESAMPLE: Duration = Duration::from_secs(10);

/// A reading slower than this says little about when the database read
/// its clock; it is dropped and the previous anchor kept.
const MAX_ROUND_TRIP: Duration = Duration::from_secs(1);

/// The database's time at one instant of this process's monotonic clock.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    database: UnixMillis,
    at: Instant,
}

#[derive(Debug)]
pub struct DatabaseClock {
    anchor: RwLock<Anchor>,
    /// The latest time handed out: a new anchor a few milliseconds behind
    /// the old one's extrapolation does not make time go back.
    last: AtomicI64,
}

impl DatabaseClock {
    /// Reads the database's clock now (an error if it cannot) and again
    /// every `resample` for as long as the clock is in use.
    pub async fn start(pool: &AnyPool, resample: Duration) -> anyhow::Result<Arc<Self>> {
        let anchor = read(pool).await.context("reading the database's clock")?.0;
        let clock = Arc::new(Self {
            anchor: RwLock::new(anchor),
            last: AtomicI64::new(i64::MIN),
        });
        tracing::info!(
            offset_ms = anchor.database.0 - SystemClock.now().0,
            "the node keeps the database's time (its own clock's offset from it)"
        );
        tokio::spawn(resample_while_used(
            Arc::downgrade(&clock),
            pool.clone(),
            resample,
        ));
        Ok(clock)
    }

    fn set(&self, anchor: Anchor) {
        *self.anchor.write().unwrap_or_else(|p| p.into_inner()) = anchor;
    }
}

impl Clock for DatabaseClock {
    fn now(&self) -> UnixMillis {
        let anchor = *self.anchor.read().unwrap_or_else(|p| p.into_inner());
        let elapsed = i64::try_from(anchor.at.elapsed().as_millis()).unwrap_or(i64::MAX);
        let now = anchor.database.0.saturating_add(elapsed);
        let before = self.last.fetch_max(now, Ordering::AcqRel);
        UnixMillis(before.max(now))
    }
}

/// One reading: the database's clock, placed at the middle of the round
/// trip; and how long the round trip took.
async fn read(pool: &AnyPool) -> anyhow::Result<(Anchor, Duration)> {
    let sent = Instant::now();
    let database: i64 =
        sqlx::query_scalar("SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)")
            .fetch_one(pool)
            .await?;
    let round_trip = sent.elapsed();
    Ok((
        Anchor {
            database: UnixMillis(database),
            at: sent + round_trip / 2,
        },
        round_trip,
    ))
}

async fn resample_while_used(clock: Weak<DatabaseClock>, pool: AnyPool, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let reading = read(&pool).await;
        let Some(clock) = clock.upgrade() else {
            return;
        };
        match reading {
            Ok((anchor, round_trip)) if round_trip <= MAX_ROUND_TRIP => clock.set(anchor),
            Ok((_, round_trip)) => {
                tracing::debug!(?round_trip, "slow database clock reading dropped");
            }
            Err(e) => tracing::warn!(error = %e, "reading the database's clock"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_runs_on_from_the_anchor_and_never_goes_back() {
        let clock = DatabaseClock {
            anchor: RwLock::new(Anchor {
                database: UnixMillis(1_000_000),
                at: Instant::now(),
            }),
            last: AtomicI64::new(i64::MIN),
        };
        let first = clock.now();
        assert!((1_000_000..1_001_000).contains(&first.0), "{first:?}");
        // A new reading behind the last time handed out does not move time back.
        clock.set(Anchor {
            database: UnixMillis(900_000),
            at: Instant::now(),
        });
        assert!(clock.now() >= first);
        // One ahead moves it forward.
        clock.set(Anchor {
            database: UnixMillis(2_000_000),
            at: Instant::now(),
        });
        assert!(clock.now().0 >= 2_000_000);
    }
}
