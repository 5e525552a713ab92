//! When a failed delivery is tried again (decision 0091): the wait after
//! attempt `n` is `base · 2^(n-1)`, capped at `cap`, then jittered to
//! 80–100 % of itself so that endpoints that failed together do not all
//! come back in the same instant. A delivery whose next attempt would fall
//! past its budget (counted from `retry_since`) is dead-lettered instead.

use std::time::Duration;

use rand::Rng;

use super::WebhookConfig;

/// The wait after `attempts` failed attempts, before jitter.
pub fn backoff(config: &WebhookConfig, attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(30);
    config
        .retry_base
        .saturating_mul(1u32 << doublings)
        .min(config.retry_cap)
}

/// The wait after `attempts` failed attempts, jittered.
pub fn jittered(config: &WebhookConfig, attempts: u32) -> Duration {
    let wait = backoff(config, attempts);
    wait.mul_f64(rand::rng().random_range(0.8..=1.0))
}

/// The next attempt's time (epoch millis), or `None` when it would be past
/// the budget: then the delivery is dead-lettered.
pub fn next_attempt(
    config: &WebhookConfig,
    attempts: u32,
    retry_since: i64,
    now: i64,
) -> Option<i64> {
    let next = now + millis(jittered(config, attempts));
    (next <= retry_since + millis(config.retry_budget)).then_some(next)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_up_to_the_cap() {
        let config = WebhookConfig::default();
        assert_eq!(backoff(&config, 1), Duration::from_secs(10));
        assert_eq!(backoff(&config, 2), Duration::from_secs(20));
        assert_eq!(backoff(&config, 9), Duration::from_secs(2560));
        assert_eq!(backoff(&config, 10), Duration::from_secs(3600));
        assert_eq!(backoff(&config, 1000), Duration::from_secs(3600));
    }

    #[test]
    fn the_default_schedule_retries_for_three_days_then_gives_up() {
        let config = WebhookConfig::default();
        let start = 0;
        let (mut now, mut attempts) = (start, 0u32);
        loop {
            attempts += 1;
            match next_attempt(&config, attempts, start, now) {
                Some(next) => now = next,
                None => break,
            }
        }
        let days = now as f64 / 86_400_000.0;
        assert!(days > 2.9 && days <= 3.0, "gave up after {days} days");
        assert!((75..=100).contains(&attempts), "{attempts} attempts");
    }

    #[test]
    fn jitter_stays_within_a_fifth_below_the_wait() {
        let config = WebhookConfig::default();
        for _ in 0..100 {
            let wait = jittered(&config, 3);
            assert!(wait >= Duration::from_secs(32) && wait <= Duration::from_secs(40));
        }
    }
}
