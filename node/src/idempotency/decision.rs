//! The decision table of DESIGN §4, as a pure function: given the record a
//! losing claim found, what does this request do?
//!
//! Kept free of I/O so every row of the table is unit-tested here, and the
//! engine that acts on the answer stays a plain `match`.

use std::time::Duration;

use super::record::{Record, Status};
use crate::domain::UnixMillis;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Same key, different normalized command: 409, never a replay (I3).
    Mismatch,
    /// Finished with a stored answer: replay it byte for byte (I2).
    Replay,
    /// Someone holds a valid lease: 409 with `Retry-After`.
    InProgress { retry_after: Duration },
    /// The owner's lease ran out, or the outcome is unknown: take over with
    /// a fence and resume from the recorded step, asking the provider by key
    /// before any charge.
    TakeOver,
    /// Failed before any side effect: run it again under the same record.
    Restart,
    /// The replay window has passed: the key is free again, and this is a
    /// new operation (the business key still guards against a duplicate).
    Renew,
    /// The record was fingerprinted by a newer release this build does not
    /// understand; comparing would be a guess, so the client must retry.
    Incomparable,
}

/// `fingerprint_matches` is `None` when the record's fingerprint version is
/// unknown to this build.
pub fn decide(record: &Record, fingerprint_matches: Option<bool>, now: UnixMillis) -> Decision {
    if record.is_expired(now) {
        return Decision::Renew;
    }
    match fingerprint_matches {
        None => return Decision::Incomparable,
        Some(false) => return Decision::Mismatch,
        Some(true) => {}
    }
    let lease_left = now.until(record.locked_until);
    match record.status {
        Status::Completed | Status::FailedReplayable => Decision::Replay,
        Status::InProgress if record.lease_expired(now) => Decision::TakeOver,
        Status::InProgress => Decision::InProgress {
            retry_after: lease_left,
        },
        // A client retry triggers recovery at once rather than waiting out
        // the worker's backoff; while someone recovers, the record is
        // IN_PROGRESS again and the rows above answer.
        Status::UnknownRequiresRecovery => Decision::TakeOver,
        Status::FailedRetryable => Decision::Restart,
        // `is_expired` already answered for this status.
        Status::Expired => Decision::Renew,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{IdempotencyKey, PrincipalId, TenantId};
    use crate::idempotency::record::{Scope, Step};

    const NOW: UnixMillis = UnixMillis(1_000_000);

    fn record(status: Status, locked_until: i64, expires_at: Option<i64>) -> Record {
        Record {
            scope: Scope {
                tenant: TenantId::parse("t").unwrap(),
                principal: PrincipalId::parse("p").unwrap(),
                operation: "payments.create",
                key: IdempotencyKey::parse(b"k").unwrap(),
            },
            fingerprint_version: 1,
            fingerprint: "f".into(),
            status,
            step: Step::Received,
            fence: 1,
            locked_until: UnixMillis(locked_until),
            payment_id: None,
            provider_key: None,
            response: None,
            error_code: None,
            trace_id: None,
            region: "r".into(),
            takeovers: 0,
            created_at: UnixMillis(0),
            updated_at: UnixMillis(0),
            expires_at: expires_at.map(UnixMillis),
        }
    }

    #[test]
    fn every_row_of_the_table() {
        let later = NOW.0 + 5_000;
        let earlier = NOW.0 - 1;
        let window = Some(NOW.0 + 86_400_000);
        assert_eq!(
            decide(
                &record(Status::Completed, earlier, window),
                Some(false),
                NOW
            ),
            Decision::Mismatch
        );
        assert_eq!(
            decide(&record(Status::InProgress, later, None), Some(false), NOW),
            Decision::Mismatch
        );
        assert_eq!(
            decide(&record(Status::Completed, earlier, window), Some(true), NOW),
            Decision::Replay
        );
        assert_eq!(
            decide(
                &record(Status::FailedReplayable, earlier, window),
                Some(true),
                NOW
            ),
            Decision::Replay
        );
        assert_eq!(
            decide(&record(Status::InProgress, later, None), Some(true), NOW),
            Decision::InProgress {
                retry_after: Duration::from_secs(5)
            }
        );
        assert_eq!(
            decide(&record(Status::InProgress, earlier, None), Some(true), NOW),
            Decision::TakeOver
        );
        assert_eq!(
            decide(
                &record(Status::UnknownRequiresRecovery, later, None),
                Some(true),
                NOW
            ),
            Decision::TakeOver
        );
        assert_eq!(
            decide(
                &record(Status::UnknownRequiresRecovery, earlier, None),
                Some(true),
                NOW
            ),
            Decision::TakeOver
        );
        assert_eq!(
            decide(
                &record(Status::FailedRetryable, earlier, window),
                Some(true),
                NOW
            ),
            Decision::Restart
        );
        assert_eq!(
            decide(&record(Status::Completed, earlier, None), None, NOW),
            Decision::Incomparable
        );
    }

    #[test]
    fn expiry_frees_the_key_but_never_for_unfinished_records() {
        let past = Some(NOW.0 - 1);
        assert_eq!(
            decide(&record(Status::Completed, 0, past), Some(false), NOW),
            Decision::Renew
        );
        assert_eq!(
            decide(&record(Status::Expired, 0, past), Some(true), NOW),
            Decision::Renew
        );
        assert_eq!(
            decide(
                &record(Status::InProgress, NOW.0 + 1, past),
                Some(true),
                NOW
            ),
            Decision::InProgress {
                retry_after: Duration::from_millis(1)
            }
        );
    }
}
