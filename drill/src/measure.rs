//! What the clients experienced, computed from the client log alone: how
//! long after the fault the region's tenants first failed (detection as
//! clients see it) and first succeeded again (time to recover), which
//! errors they saw, and the throughput.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::client_log::{ClientLog, EpochMillis};

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
    /// Attempts that were not successes, by `status errorCode`.
    pub errors: BTreeMap<String, u64>,
    pub operations: u64,
    pub attempts: u64,
    /// Operations with a final answer / without one when the drill ended.
    pub answered: u64,
    pub unanswered: u64,
    /// Successful answers per second over the span of the attempts.
    pub successes_per_second: f64,
    pub attempts_per_second: f64,
}

/// Measures `log` against a fault at `fault_at` in the region that is home
/// to `affected` tenants.
pub fn measure(
    log: &ClientLog,
    fault_at: Option<EpochMillis>,
    affected: &[String],
) -> Measurements {
    let mut tenants = Vec::new();
    if let Some(fault_at) = fault_at {
        for tenant in affected {
            let after: Vec<_> = log
                .attempts
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
        log.attempts.iter().map(|a| a.sent_at).min(),
        log.attempts.iter().map(|a| a.answered_at).max(),
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
        max_detection_ms: tenants.iter().filter_map(|t| t.detection_ms).max(),
        max_recovery_ms: tenants.iter().filter_map(|t| t.recovery_ms).max(),
        never_recovered,
        tenants,
        errors,
        operations: log.operations.len() as u64,
        attempts: log.attempts.len() as u64,
        answered,
        unanswered: log.operations.len() as u64 - answered,
        successes_per_second: per_second(log.attempts.iter().filter(|a| a.is_success()).count()),
        attempts_per_second: per_second(log.attempts.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client_log::Attempt;

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
        let m = measure(&log, Some(1000), &["acme".into(), "globex".into()]);
        assert_eq!(m.tenants[0].detection_ms, Some(5));
        assert_eq!(m.tenants[0].recovery_ms, Some(510));
        assert_eq!(m.tenants[1].detection_ms, Some(210));
        assert_eq!(m.never_recovered, vec!["globex".to_owned()]);
        assert_eq!(m.max_recovery_ms, Some(510));
        assert_eq!(m.errors["no answer"], 1);
        assert_eq!(m.errors["421"], 1);
    }
}
