//! Per-key histories from the client log: every attempt becomes one call on
//! the object `(tenant, key)`, invoked when it was sent, answered when its
//! answer arrived if that answer is determinate, with the [`Effect`] its
//! answer tells; and a [`HistoryEntry`] saying the same for people. Nothing
//! is dropped: an attempt whose answer says nothing keeps its place as a
//! call that may or may not have taken effect.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::model::{AnswerId, BodyId, Effect, Op};
use super::search::Call;
use crate::client_log::{Attempt, ClientLog, KEY_REUSED, body_hash};

/// One attempt of a key's history, as people read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// The operation the attempt belongs to.
    pub op: u64,
    pub body_sha256: String,
    pub sent_at: u64,
    /// When its answer arrived; `None` when the answer was indeterminate
    /// (it stays concurrent with everything sent after it).
    pub answered_at: Option<u64>,
    /// What the answer says happened: `201 executed`, `201 replayed`, `409
    /// mismatch`, `indeterminate (no answer)`, `400 VALIDATION_ERROR (no
    /// effect)`.
    pub outcome: String,
    pub response_body: Option<String>,
}

impl HistoryEntry {
    /// One line for a report: `op 7 sent 1000 answered 1005: 201 replayed
    /// (request 1a2b3c4d, answer 9f8e7d6c)`, bodies named by the first hex
    /// digits of their SHA-256.
    pub fn compact(&self) -> String {
        let answered = self.answered_at.map_or_else(
            || "no determinate answer".to_owned(),
            |at| format!("answered {at}"),
        );
        let answer = self
            .response_body
            .as_deref()
            .map_or_else(String::new, |body| format!(", answer {}", short_hash(body)));
        format!(
            "op {} sent {} {answered}: {} (request {}{answer})",
            self.op,
            self.sent_at,
            self.outcome,
            self.body_sha256.get(..8).unwrap_or(&self.body_sha256),
        )
    }
}

/// The first eight hex digits of a response body's SHA-256: enough to tell
/// the answers of one key apart in a report.
pub fn short_hash(body: &str) -> String {
    let mut hash = body_hash(body.as_bytes());
    hash.truncate(8);
    hash
}

/// Every attempt under one scoped key, in the order they were sent.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyHistory {
    pub tenant: String,
    pub key: String,
    /// What the search reads.
    pub calls: Vec<Call<Op>>,
    /// The same attempts, index for index, as people read them.
    pub entries: Vec<HistoryEntry>,
}

impl KeyHistory {
    pub fn indeterminate(&self) -> usize {
        self.calls
            .iter()
            .filter(|c| c.op.effect == Effect::Indeterminate)
            .count()
    }

    pub fn without_effect(&self) -> usize {
        self.calls
            .iter()
            .filter(|c| c.op.effect == Effect::Inert)
            .count()
    }
}

/// Every scoped key's history, in `(tenant, key)` order.
pub fn histories(log: &ClientLog) -> Vec<KeyHistory> {
    let mut by_key: BTreeMap<(&str, &str), Vec<&Attempt>> = BTreeMap::new();
    for attempt in &log.attempts {
        by_key
            .entry((&attempt.tenant, &attempt.key))
            .or_default()
            .push(attempt);
    }
    by_key
        .into_iter()
        .map(|((tenant, key), mut attempts)| {
            attempts.sort_by_key(|a| (a.sent_at, a.op));
            let mut bodies = Numbering::default();
            let mut answers = Numbering::default();
            let (calls, entries) = attempts
                .into_iter()
                .map(|a| {
                    let effect = effect_of(a, &mut answers);
                    let call = Call {
                        invoked: a.sent_at,
                        // A clock that put the answer before the request
                        // would make the attempt precede itself.
                        responded: (effect != Effect::Indeterminate)
                            .then_some(a.answered_at.max(a.sent_at)),
                        op: Op {
                            body: BodyId(bodies.number(a.body_sha256.clone())),
                            effect,
                        },
                    };
                    let entry = HistoryEntry {
                        op: a.op,
                        body_sha256: a.body_sha256.clone(),
                        sent_at: a.sent_at,
                        answered_at: call.responded,
                        outcome: outcome_of(a, effect),
                        response_body: a.response_body.clone(),
                    };
                    (call, entry)
                })
                .unzip();
            KeyHistory {
                tenant: tenant.to_owned(),
                key: key.to_owned(),
                calls,
                entries,
            }
        })
        .collect()
}

/// What the attempt's answer says it did to the key.
fn effect_of(attempt: &Attempt, answers: &mut Numbering<(Option<u16>, Option<String>)>) -> Effect {
    if !attempt.is_final() {
        return Effect::Indeterminate;
    }
    if attempt.is_stored_answer() {
        let answer = AnswerId(answers.number((attempt.status, attempt.response_body.clone())));
        return if attempt.replayed {
            Effect::Replayed(answer)
        } else {
            Effect::Executed(answer)
        };
    }
    if attempt.status == Some(409) && attempt.error_code.as_deref() == Some(KEY_REUSED) {
        return Effect::Mismatch;
    }
    Effect::Inert
}

fn outcome_of(attempt: &Attempt, effect: Effect) -> String {
    let class = attempt.error_class();
    match effect {
        Effect::Executed(_) => format!("{class} executed"),
        Effect::Replayed(_) => format!("{class} replayed"),
        Effect::Mismatch => "409 mismatch".to_owned(),
        Effect::Indeterminate => format!("indeterminate ({class})"),
        Effect::Inert => format!("{class} (no effect)"),
    }
}

/// Numbers distinct values in the order they are first seen.
#[derive(Debug)]
struct Numbering<T> {
    numbers: HashMap<T, u32>,
}

impl<T> Default for Numbering<T> {
    fn default() -> Self {
        Self {
            numbers: HashMap::new(),
        }
    }
}

impl<T: Eq + std::hash::Hash> Numbering<T> {
    fn number(&mut self, value: T) -> u32 {
        let next = u32::try_from(self.numbers.len()).unwrap_or(u32::MAX);
        *self.numbers.entry(value).or_insert(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(op: u64, key: &str, body: &str, sent_at: u64) -> Attempt {
        Attempt {
            op,
            tenant: "acme".into(),
            key: key.into(),
            body_sha256: body.into(),
            sent_at,
            answered_at: sent_at + 5,
            status: Some(201),
            error_code: None,
            transport_error: None,
            response_body: Some(r#"{"id":"pay_1"}"#.into()),
            region: None,
            replayed: false,
        }
    }

    #[test]
    fn each_scoped_key_gets_its_attempts_in_send_order_and_none_is_dropped() {
        let mut timeout = attempt(1, "k1", "b1", 100);
        timeout.status = None;
        timeout.response_body = None;
        let mut replay = attempt(2, "k1", "b1", 50);
        replay.replayed = true;
        let mut other_tenant = attempt(3, "k1", "b1", 10);
        other_tenant.tenant = "globex".into();
        let log = ClientLog {
            operations: Vec::new(),
            attempts: vec![timeout, replay, other_tenant, attempt(4, "k2", "b9", 7)],
        };
        let histories = histories(&log);
        let keys: Vec<_> = histories
            .iter()
            .map(|h| (h.tenant.as_str(), h.key.as_str(), h.calls.len()))
            .collect();
        assert_eq!(
            keys,
            [("acme", "k1", 2), ("acme", "k2", 1), ("globex", "k1", 1)]
        );
        let k1 = &histories[0];
        let outcomes: Vec<_> = k1.entries.iter().map(|e| e.outcome.as_str()).collect();
        assert_eq!(outcomes, ["201 replayed", "indeterminate (no answer)"]);
        assert_eq!(k1.entries[1].answered_at, None);
        assert_eq!(k1.calls[0].responded, Some(55));
        assert_eq!(k1.indeterminate(), 1);
    }

    #[test]
    fn answers_are_told_apart_by_status_and_bytes() {
        let mut answers = Numbering::default();
        let first = attempt(1, "k", "b", 0);
        let mut same = attempt(2, "k", "b", 10);
        same.replayed = true;
        let mut changed = same.clone();
        changed.response_body = Some(r#"{"id":"pay_1" }"#.into());
        let mut declined = same.clone();
        declined.status = Some(402);
        let effects: Vec<_> = [&first, &same, &changed, &declined]
            .into_iter()
            .map(|a| effect_of(a, &mut answers))
            .collect();
        assert_eq!(
            effects,
            [
                Effect::Executed(AnswerId(0)),
                Effect::Replayed(AnswerId(0)),
                Effect::Replayed(AnswerId(1)),
                Effect::Replayed(AnswerId(2)),
            ]
        );
    }

    #[test]
    fn every_answer_is_classified_as_the_contract_reads_it() {
        let mut answers = Numbering::default();
        let cases: [(Option<u16>, Option<&str>, Effect, &str); 8] = [
            (
                Some(402),
                None,
                Effect::Executed(AnswerId(0)),
                "402 executed",
            ),
            (
                Some(409),
                Some("DUPLICATE_MERCHANT_REFERENCE"),
                Effect::Executed(AnswerId(1)),
                "409 DUPLICATE_MERCHANT_REFERENCE executed",
            ),
            (
                Some(409),
                Some(KEY_REUSED),
                Effect::Mismatch,
                "409 mismatch",
            ),
            (
                Some(409),
                Some("IDEMPOTENCY_REQUEST_IN_PROGRESS"),
                Effect::Indeterminate,
                "indeterminate (409 IDEMPOTENCY_REQUEST_IN_PROGRESS)",
            ),
            (
                Some(503),
                None,
                Effect::Indeterminate,
                "indeterminate (503)",
            ),
            (
                Some(421),
                None,
                Effect::Indeterminate,
                "indeterminate (421)",
            ),
            (
                Some(202),
                None,
                Effect::Indeterminate,
                "indeterminate (202)",
            ),
            (
                Some(400),
                Some("VALIDATION_ERROR"),
                Effect::Inert,
                "400 VALIDATION_ERROR (no effect)",
            ),
        ];
        for (status, code, effect, outcome) in cases {
            let mut a = attempt(1, "k", "b", 0);
            a.status = status;
            a.error_code = code.map(str::to_owned);
            assert_eq!(effect_of(&a, &mut answers), effect, "{status:?} {code:?}");
            assert_eq!(outcome_of(&a, effect), outcome);
        }
    }
}
