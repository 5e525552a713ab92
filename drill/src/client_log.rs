//! What the drill's clients did and saw: every logical operation (a key and
//! the exact body bytes it is sent with) and every attempt at it, with the
//! answer as received. This is evidence (a) of the checker and the input of
//! the measurements; it is plain data so tests can plant violations in it.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The error code of a `409` whose merchant reference another payment holds.
pub const DUPLICATE_REFERENCE: &str = "DUPLICATE_MERCHANT_REFERENCE";
/// The error code of a `409` for a key reused with a different request.
pub const KEY_REUSED: &str = "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST";

/// Milliseconds since the Unix epoch.
pub type EpochMillis = u64;

/// Now, in [`EpochMillis`].
pub fn now_ms() -> EpochMillis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Hex SHA-256 of a request body: the log names bodies by hash.
pub fn body_hash(body: &[u8]) -> String {
    hex::encode(Sha256::digest(body))
}

/// Why an operation was sent, which decides what answer is correct.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Intent {
    /// A new payment under a fresh key: expects `201`.
    Payment,
    /// The key and byte-identical body of operation `of`, sent again after
    /// its stored answer (`201`, `402`, `409 DUPLICATE_MERCHANT_REFERENCE`):
    /// during the load after a `201`, and once more for every stored answer
    /// after the fault ([`crate::final_replay`]). Expects that answer's
    /// status and body byte for byte, marked `Idempotent-Replayed` (I2).
    Replay { of: u64 },
    /// The key of operation `of` with a different body: expects `409
    /// IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST` (I3).
    MismatchedBody { of: u64 },
    /// One of several operations with the same `(accountId,
    /// merchantReference)`, each under its own key (a duplicate sent without
    /// reusing the key): at most one payment per group (I1, DESIGN §1 case 6).
    KeylessDuplicate { group: u64 },
    /// The idempotence workload's re-send of operation `of` from the
    /// clients' bounded memory ([`crate::resend`]), first through another
    /// region's node than the tenant's home. `same_body`: `of`'s key and
    /// bytes, possibly before `of` was answered or after it never was —
    /// expects `of`'s stored answer byte for byte, one payment in all.
    /// Otherwise `of`'s key with another body, sent only once `of` has a
    /// stored answer — expects `409
    /// IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST` (DESIGN I2, I3).
    Resend { of: u64, same_body: bool },
}

/// One logical operation: its key and the exact bytes every attempt sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    pub id: u64,
    pub intent: Intent,
    pub tenant: String,
    pub key: String,
    pub account_id: String,
    pub merchant_reference: String,
    /// The request body, sent byte-identical on every attempt.
    pub body: String,
    pub body_sha256: String,
}

/// One HTTP attempt at an operation and what came back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub op: u64,
    pub tenant: String,
    pub key: String,
    pub body_sha256: String,
    pub sent_at: EpochMillis,
    pub answered_at: EpochMillis,
    /// `None` when no HTTP answer arrived (see `transport_error`).
    pub status: Option<u16>,
    pub error_code: Option<String>,
    pub transport_error: Option<String>,
    /// The response body exactly as received.
    pub response_body: Option<String>,
    /// `X-Once-Region`: the region whose node answered.
    pub region: Option<String>,
    /// `Idempotent-Replayed: true` was present.
    pub replayed: bool,
}

impl Attempt {
    /// A final answer ends the operation; everything else is retried with
    /// the same key and bytes, as `once-client` retries it: no answer, 5xx,
    /// `421 Misdirected Request`, `429` (over the tenant's rate or in-flight
    /// cap), `408` (the body came too slowly), `409
    /// IDEMPOTENCY_REQUEST_IN_PROGRESS`, and `202` (the provider's outcome
    /// is still being recovered).
    pub fn is_final(&self) -> bool {
        match self.status {
            None => false,
            Some(s) if s >= 500 || matches!(s, 421 | 429 | 408 | 202) => false,
            Some(409) => self.error_code.as_deref() != Some("IDEMPOTENCY_REQUEST_IN_PROGRESS"),
            Some(_) => true,
        }
    }

    /// An answer the service stores and must replay byte for byte on every
    /// retry of the key (DESIGN I2): `201`, `402` (declined) and `409
    /// DUPLICATE_MERCHANT_REFERENCE`.
    pub fn is_stored_answer(&self) -> bool {
        match self.status {
            Some(201 | 402) => true,
            Some(409) => self.error_code.as_deref() == Some(DUPLICATE_REFERENCE),
            _ => false,
        }
    }

    /// Failed as a client sees failure: no answer, 5xx or 421.
    pub fn is_failure(&self) -> bool {
        self.status.is_none_or(|s| s >= 500 || s == 421)
    }

    pub fn is_success(&self) -> bool {
        self.status
            .is_some_and(|s| (200..300).contains(&s) && s != 202)
    }

    /// The payment id in a `201` body (`id`) or a `402`/`409`/`202` body
    /// (`paymentId`).
    pub fn payment_id(&self) -> Option<String> {
        let body: serde_json::Value = serde_json::from_str(self.response_body.as_deref()?).ok()?;
        let field = if self.status == Some(201) {
            "id"
        } else {
            "paymentId"
        };
        body.get(field)?.as_str().map(str::to_owned)
    }

    /// The payment `status` field of a `201` body.
    pub fn payment_status(&self) -> Option<String> {
        let body: serde_json::Value = serde_json::from_str(self.response_body.as_deref()?).ok()?;
        body.get("status")?.as_str().map(str::to_owned)
    }

    /// `status errorCode` (or `no answer`), the key errors are counted by.
    pub fn error_class(&self) -> String {
        match (self.status, &self.error_code) {
            (None, _) => "no answer".to_owned(),
            (Some(s), Some(code)) => format!("{s} {code}"),
            (Some(s), None) => s.to_string(),
        }
    }
}

/// Everything the clients did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientLog {
    pub operations: Vec<Operation>,
    pub attempts: Vec<Attempt>,
}

impl ClientLog {
    pub fn operation(&self, id: u64) -> Option<&Operation> {
        self.operations.iter().find(|o| o.id == id)
    }

    /// The attempts at operation `op`, in the order they were sent.
    pub fn attempts_of(&self, op: u64) -> impl Iterator<Item = &Attempt> {
        self.attempts.iter().filter(move |a| a.op == op)
    }

    /// The operation's final answer, if it got one.
    pub fn final_answer(&self, op: u64) -> Option<&Attempt> {
        self.attempts_of(op).find(|a| a.is_final())
    }
}

/// The log the concurrent clients append to.
#[derive(Debug, Default)]
pub struct SharedLog {
    // A std mutex: appends never await.
    inner: Mutex<ClientLog>,
}

impl SharedLog {
    pub fn add_operation(&self, op: Operation) {
        self.lock().operations.push(op);
    }

    pub fn add_attempt(&self, attempt: Attempt) {
        self.lock().attempts.push(attempt);
    }

    /// A copy of the log so far, attempts sorted by send time.
    pub fn snapshot(&self) -> ClientLog {
        let mut log = self.lock().clone();
        log.attempts.sort_by_key(|a| (a.sent_at, a.op));
        log.operations.sort_by_key(|o| o.id);
        log
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClientLog> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: Option<u16>, code: Option<&str>) -> Attempt {
        Attempt {
            op: 1,
            tenant: "t".into(),
            key: "k".into(),
            body_sha256: "b".into(),
            sent_at: 0,
            answered_at: 1,
            status,
            error_code: code.map(str::to_owned),
            transport_error: None,
            response_body: None,
            region: None,
            replayed: false,
        }
    }

    /// Found by a chaos run: an operation whose last attempt before the
    /// drill's deadline was a `429` counted as finally answered `429`.
    #[test]
    fn what_the_client_retries_is_not_a_final_answer() {
        for status in [
            None,
            Some(202),
            Some(408),
            Some(421),
            Some(429),
            Some(500),
            Some(503),
        ] {
            assert!(!answered(status, None).is_final(), "{status:?}");
        }
        assert!(!answered(Some(409), Some("IDEMPOTENCY_REQUEST_IN_PROGRESS")).is_final());
        for (status, code) in [
            (201, None),
            (402, None),
            (400, Some("VALIDATION_FAILED")),
            (409, Some(KEY_REUSED)),
            (409, Some(DUPLICATE_REFERENCE)),
        ] {
            assert!(answered(Some(status), code).is_final(), "{status} {code:?}");
        }
    }
}
