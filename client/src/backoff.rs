//! How long to wait before the next attempt: capped exponential backoff with
//! full jitter, and the server's `Retry-After` as a floor.
//!
//! Full jitter (a uniform draw between zero and the capped exponential)
//! spreads clients that failed together, so a region that comes back is not
//! hit by all of them in the same millisecond. A `Retry-After` is the
//! server's own estimate of when trying again is worth it; waiting less
//! only earns another refusal, so it is a floor, itself capped (a server
//! that asks for an hour does not get to park a payment call for an hour)
//! and spread by up to a fifth on top, for the same reason as the jitter.

use std::time::Duration;

use rand::Rng;

/// The backoff between attempts of one logical call.
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    /// The ceiling of the first wait.
    pub initial: Duration,
    /// No wait is longer than this, `Retry-After` included.
    pub max: Duration,
    /// How much the ceiling grows per retry.
    pub multiplier: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
            multiplier: 2.0,
        }
    }
}

impl Backoff {
    /// The ceiling of the wait after the `retry`-th failed attempt (0-based):
    /// `initial × multiplier^retry`, at most `max`.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let exponent = i32::try_from(retry).unwrap_or(i32::MAX);
        let secs = self.initial.as_secs_f64() * self.multiplier.powi(exponent);
        if secs.is_finite() && secs < self.max.as_secs_f64() {
            Duration::from_secs_f64(secs)
        } else {
            self.max
        }
    }

    /// The wait after the `retry`-th failed attempt, given the answer's
    /// `Retry-After` if it had one.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>, rng: &mut impl Rng) -> Duration {
        let jittered = uniform(self.ceiling(retry), rng);
        match retry_after {
            None => jittered,
            Some(after) => {
                let floor = after.min(self.max);
                let spread = uniform(floor / 5, rng);
                jittered.max(floor + spread)
            }
        }
    }
}

fn uniform(up_to: Duration, rng: &mut impl Rng) -> Duration {
    let nanos = u64::try_from(up_to.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rng.random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    fn policy() -> Backoff {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
            multiplier: 2.0,
        }
    }

    #[test]
    fn the_ceiling_grows_by_the_multiplier_and_stops_at_the_cap() {
        let b = policy();
        let ceilings: Vec<u128> = (0..7).map(|r| b.ceiling(r).as_millis()).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(b.ceiling(u32::MAX), b.max);
    }

    #[test]
    fn waits_are_spread_over_the_whole_range_and_never_above_the_ceiling() {
        let b = policy();
        let mut rng = StdRng::seed_from_u64(7);
        let waits: Vec<Duration> = (0..1000).map(|_| b.delay(3, None, &mut rng)).collect();
        assert!(waits.iter().all(|w| *w <= Duration::from_millis(800)));
        assert!(waits.iter().any(|w| *w < Duration::from_millis(100)));
        assert!(waits.iter().any(|w| *w > Duration::from_millis(700)));
    }

    #[test]
    fn retry_after_is_a_floor_spread_by_a_fifth_and_capped_by_max() {
        let b = policy();
        let mut rng = StdRng::seed_from_u64(11);
        for _ in 0..1000 {
            let wait = b.delay(0, Some(Duration::from_secs(1)), &mut rng);
            assert!(wait >= Duration::from_secs(1), "{wait:?}");
            assert!(wait <= Duration::from_millis(1200), "{wait:?}");
            let capped = b.delay(0, Some(Duration::from_secs(3600)), &mut rng);
            assert!(capped >= b.max && capped <= b.max + b.max / 5, "{capped:?}");
        }
    }
}
