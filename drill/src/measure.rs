//! What the clients experienced, computed from the client log alone: how
//! long after the fault the region's tenants first failed (detection as
//! clients see it) and first succeeded again (time to recover), which
//! errors they saw, and the throughput.
//!
//! Times and throughput are the load's: only attempts answered by the end
//! of the load count. What comes after (restarting the region, failback
//! probes, the final replays) is traffic the drill sends on purpose at its
//! own pace; a failback probe failing while the router still sends the
//! tenant away is not the fault being detected, and a final replay is not
//! the tenant recovering.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::client_log::{Attempt, ClientLog, EpochMillis};

/// Per tenant homed in the faulted region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantTimes {
    pub tenant: String,
    /// From the fault to this tenant's first failed attempt; `None` if no
    /// attempt failed (the fault was invisible to it).
    pub detection_ms: Option<u64>,
    /// From the fault to its first success after that failure; `None` if it
    /// never succeeded again during the drill.
    pub recovery_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    pub fault_at: Option<EpochMillis>,
    pub tenants: Vec<TenantTimes>,
    pub max_detection_ms: Option<u64>,
    pub max_recovery_ms: Option<u64>,
    /// Tenants that failed and never succeeded again.
    pub never_recovered: Vec<String>,
    /// When the load ended: the attempts measured are the ones answered by
    /// then.
    pub load_ended_at: EpochMillis,
    /// Attempts that were not successes, by `status errorCode` (every
    /// attempt of the drill, the later phases' too).
    pub errors: BTreeMap<String, u64>,
    pub operations: u64,
    pub attempts: u64,
    /// Operations with a final answer / without one when the drill ended.
    pub answered: u64,
    pub unanswered: u64,
    /// Successful answers per second over the span of the load's attempts.
    pub successes_per_second: f64,
    pub attempts_per_second: f64,
}

/// Measures `log` against a fault at `fault_at` in the region that is home
/// to `affected` tenants, over the load that ended at `load_ended_at`.
pub fn measure(
    log: &ClientLog,
    fault_at: Option<EpochMillis>,
    affected: &[String],
    load_ended_at: EpochMillis,
) -> Measurements {
    let load: Vec<&Attempt> = log
        .attempts
        .iter()
        .filter(|a| a.answered_at <= load_ended_at)
        .collect();
    let mut tenants = Vec::new();
    if let Some(fault_at) = fault_at {
        for tenant in affected {
            let after: Vec<_> = load
                .iter()
                // Answered after the fault: requests in flight when it hit count.
                .filter(|a| &a.tenant == tenant && a.answered_at >= fault_at)
                .collect();
            let first_failure = after.iter().find(|a| a.is_failure());
            let recovered = first_failure.and_then(|failure| {
                after
                    .iter()
                    .find(|a| a.is_success() && a.sent_at >= failure.answered_at)
            });
            tenants.push(TenantTimes {
                tenant: tenant.clone(),
                detection_ms: first_failure.map(|a| a.answered_at.saturating_sub(fault_at)),
                recovery_ms: recovered.map(|a| a.answered_at.saturating_sub(fault_at)),
            });
        }
    }
    let never_recovered = tenants
        .iter()
        .filter(|t| t.detection_ms.is_some() && t.recovery_ms.is_none())
        .map(|t| t.tenant.clone())
        .collect();

    let mut errors = BTreeMap::new();
    for attempt in log.attempts.iter().filter(|a| !a.is_success()) {
        *errors.entry(attempt.error_class()).or_insert(0) += 1;
    }
    let answered = log
        .operations
        .iter()
        .filter(|o| log.final_answer(o.id).is_some())
        .count() as u64;
    let span_ms = match (
        load.iter().map(|a| a.sent_at).min(),
        load.iter().map(|a| a.answered_at).max(),
    ) {
        (Some(first), Some(last)) if last > first => (last - first) as f64,
        _ => 0.0,
    };
    let per_second = |n: usize| {
        if span_ms > 0.0 {
            n as f64 * 1000.0 / span_ms
        } else {
            0.0
        }
    };
    Measurements {
        fault_at,
        load_ended_at,
        max_detection_ms: tenants.iter().filter_map(|t| t.detection_ms).max(),
        max_recovery_ms: tenants.iter().filter_map(|t| t.recovery_ms).max(),
        never_recovered,
        tenants,
        errors,
        operations: log.operations.len() as u64,
        attempts: log.attempts.len() as u64,
        answered,
        unanswered: log.operations.len() as u64 - answered,
        successes_per_second: per_second(load.iter().filter(|a| a.is_success()).count()),
        attempts_per_second: per_second(load.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(tenant: &str, at: u64, status: Option<u16>) -> Attempt {
        Attempt {
            op: at,
            tenant: tenant.into(),
            key: format!("k{at}"),
            body_sha256: String::new(),
            sent_at: at,
            answered_at: at + 10,
            status,
            error_code: None,
            transport_error: None,
            response_body: None,
            region: None,
            replayed: false,
        }
    }

    #[test]
    fn detection_and_recovery_are_measured_from_the_fault_per_tenant() {
        let log = ClientLog {
            operations: Vec::new(),
            attempts: vec![
                attempt("acme", 900, Some(201)),
                attempt("acme", 995, None), // in flight when the fault hit
                attempt("acme", 1100, Some(503)),
                attempt("acme", 1500, Some(201)),
                attempt("globex", 1200, Some(421)),
                attempt("other", 1300, Some(500)),
            ],
        };
        let m = measure(&log, Some(1000), &["acme".into(), "globex".into()], 2000);
        assert_eq!(m.tenants[0].detection_ms, Some(5));
        assert_eq!(m.tenants[0].recovery_ms, Some(510));
        assert_eq!(m.tenants[1].detection_ms, Some(210));
        assert_eq!(m.never_recovered, vec!["globex".to_owned()]);
        assert_eq!(m.max_recovery_ms, Some(510));
        assert_eq!(m.errors["no answer"], 1);
        assert_eq!(m.errors["421"], 1);
    }

    #[test]
    fn failback_probes_and_final_replays_after_the_load_are_not_measured() {
        let log = ClientLog {
            operations: Vec::new(),
            attempts: vec![
                // During the load: acme fails, never succeeds again;
                // globex never sees the fault.
                attempt("acme", 1100, Some(503)),
                attempt("globex", 1200, Some(201)),
                // After the load ended at 2000: failback probes refused while
                // the router still counts the region down, then answered, and
                // the final replays.
                attempt("globex", 2500, Some(503)),
                attempt("acme", 2600, Some(201)),
                attempt("globex", 2700, Some(201)),
            ],
        };
        let m = measure(&log, Some(1000), &["acme".into(), "globex".into()], 2000);
        assert_eq!(m.tenants[0].detection_ms, Some(110));
        assert_eq!(m.tenants[0].recovery_ms, None);
        assert_eq!(m.never_recovered, vec!["acme".to_owned()]);
        assert_eq!(m.tenants[1].detection_ms, None, "{m:#?}");
        assert_eq!(m.max_recovery_ms, None);
        // Throughput over the load's span: 1100..1210.
        assert!(
            (m.attempts_per_second - 2000.0 / 110.0).abs() < 1e-9,
            "{m:#?}"
        );
        // Errors are every attempt's.
        assert_eq!(m.errors["503"], 2);
    }
}
