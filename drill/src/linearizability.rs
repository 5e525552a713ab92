//! Linearizability of the clients' history, key by key: every attempt in the
//! [`ClientLog`] is one operation on the object `(tenant, key)`, invoked when
//! it was sent and answered when its answer arrived — or never, when the
//! answer says nothing about what happened. A key's history holds when some
//! order of its attempts that respects real time (an attempt answered
//! before another was sent comes first) is a legal run of the idempotency
//! contract's sequential specification, starting from an absent key (the
//! drill's keys are fresh). Linearizability is local (Herlihy & Wing), so
//! each key is checked on its own, and a hot key costs only its own search.
//!
//! ```text
//!   client log ──history──► per key: calls (sent, answered?, effect)
//!                               │
//!                               ▼
//!                   search (model: idempotency contract)
//!                     │ holds      │ fails                │ over budget
//!                     ▼            ▼                      ▼
//!                    ok     minimize ─► KeyViolation    undecided
//! ```
//!
//! - [`history`]: per-key histories from the client log, each attempt's
//!   effect as its answer tells it, and [`HistoryEntry`] for people.
//! - [`model`]: the contract as a sequential specification.
//! - [`search`]: Wing–Gong search with a memo of explored configurations
//!   and a budget.
//! - [`minimize`]: the smallest part of a failing history that still shows
//!   why.
//! - `properties` (tests only): property tests over histories made from the
//!   model.

mod history;
mod minimize;
mod model;
#[cfg(test)]
mod properties;
mod search;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::client_log::ClientLog;
use crate::verdict::{CheckResult, Violation};
pub use history::HistoryEntry;
use history::KeyHistory;
use model::{IdempotencyContract, Refusal};
use search::{Blocked, Verdict, search};

/// How many configurations (calls linearized so far, key state) the search
/// explores for one key before calling it undecided. A key the drill
/// produces needs a handful; this leaves room for hot keys with hundreds of
/// concurrent attempts and bounds the time a pathological one can take.
pub const STATE_BUDGET: usize = 100_000;

/// What the check found, over every scoped key of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Linearizability {
    /// Scoped keys with at least one attempt.
    pub keys: usize,
    pub attempts: usize,
    /// Attempts without a determinate answer (none, 5xx, `421`, `202`, `409
    /// IDEMPOTENCY_REQUEST_IN_PROGRESS`): each may have taken effect, or not.
    pub indeterminate: usize,
    /// Final answers the contract gives no effect (a validation error, say);
    /// whether they were right is for the other checks to judge.
    pub without_effect: usize,
    /// One per key whose history is not linearizable.
    pub violations: Vec<KeyViolation>,
    /// `(tenant, key)` of each key whose history could not be decided within
    /// `state_budget` explored configurations: neither held nor violated.
    pub undecided: Vec<(String, String)>,
    pub state_budget: usize,
}

/// A key whose history is not linearizable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyViolation {
    pub tenant: String,
    pub key: String,
    /// The first reason the search met, in plain words, and the attempt it
    /// met it at.
    pub why: String,
    /// The smallest part of the key's history that still shows it, in the
    /// order the attempts were sent.
    pub history: Vec<HistoryEntry>,
}

/// Checks every scoped key's history, exploring at most [`STATE_BUDGET`]
/// configurations for each.
pub fn check(log: &ClientLog) -> Linearizability {
    check_within(log, STATE_BUDGET)
}

/// [`check`] with another budget of explored configurations per key.
pub fn check_within(log: &ClientLog, state_budget: usize) -> Linearizability {
    let histories = history::histories(log);
    let mut found = Linearizability {
        keys: histories.len(),
        attempts: log.attempts.len(),
        indeterminate: histories.iter().map(KeyHistory::indeterminate).sum(),
        without_effect: histories.iter().map(KeyHistory::without_effect).sum(),
        violations: Vec::new(),
        undecided: Vec::new(),
        state_budget,
    };
    for history in &histories {
        match search(&IdempotencyContract, &history.calls, state_budget) {
            Verdict::Linearizable => {}
            Verdict::NotLinearizable(blocked) => {
                found
                    .violations
                    .push(violation_of(history, blocked, state_budget))
            }
            Verdict::Undecided => found
                .undecided
                .push((history.tenant.clone(), history.key.clone())),
        }
    }
    found
}

fn violation_of(
    history: &KeyHistory,
    blocked: Blocked<Refusal>,
    state_budget: usize,
) -> KeyViolation {
    let kept = minimize::minimize(&history.calls, blocked.refusal, state_budget);
    let at = &history.entries[blocked.call];
    KeyViolation {
        tenant: history.tenant.clone(),
        key: history.key.clone(),
        why: format!(
            "{}: op {}, sent at {} ({})",
            blocked.refusal, at.op, at.sent_at, at.outcome
        ),
        history: kept.iter().map(|&i| history.entries[i].clone()).collect(),
    }
}

impl Linearizability {
    /// No key's history is known to break the contract. Undecided keys do
    /// not count against it; [`Linearizability::as_check`] notes them.
    pub fn holds(&self) -> bool {
        self.violations.is_empty()
    }

    /// The check `linearizable` of the drill's report: one violation per key,
    /// with its smallest failing history, one line per attempt.
    ///
    /// I1–I3 together, as the clients saw them: each scoped key's attempts can
    /// be put in one order that respects real time (an attempt answered before
    /// another was sent comes first) and is a legal run of the idempotency
    /// contract: one execution, every replay its answer byte for byte, a
    /// mismatch only once another body executed. An attempt without a
    /// determinate answer (none, 5xx, 421, 202, in progress) may have taken
    /// effect at any point after it was sent, or never, whichever explains the
    /// rest. Unlike [`crate::check::faithful_replay`], which compares answers, this catches
    /// answers that came too early: a replay answered before its execution
    /// could have happened, or a mismatch before any body was executed. A key
    /// whose history is too large to decide within the search's budget is
    /// noted, not condemned.
    pub fn as_check(&self) -> CheckResult {
        let violations = self
            .violations
            .iter()
            .map(|v| {
                let answers: serde_json::Map<String, serde_json::Value> = v
                    .history
                    .iter()
                    .filter_map(|e| e.response_body.as_deref())
                    .map(|body| (history::short_hash(body), body.into()))
                    .collect();
                Violation {
                    what: format!("key {} of tenant {}: {}", v.key, v.tenant, v.why),
                    evidence: json!({
                        "tenant": v.tenant,
                        "key": v.key,
                        "history": v.history.iter().map(HistoryEntry::compact).collect::<Vec<_>>(),
                        "answers": answers,
                    }),
                }
            })
            .collect();
        let mut notes = vec![format!(
            "{} scoped keys, {} attempts: {} indeterminate (each may have taken effect or not), \
             {} final answers without effect (judged by the other checks)",
            self.keys, self.attempts, self.indeterminate, self.without_effect
        )];
        if !self.undecided.is_empty() {
            let named: Vec<String> = self
                .undecided
                .iter()
                .take(10)
                .map(|(tenant, key)| format!("{key} of tenant {tenant}"))
                .collect();
            let more = self.undecided.len().saturating_sub(named.len());
            notes.push(format!(
                "{} keys undecided, their histories too large to search within {} \
                 explored states (neither held nor violated): {}{}",
                self.undecided.len(),
                self.state_budget,
                named.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        CheckResult::new("linearizable", "I1, I2, I3", violations, notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client_log::{Attempt, KEY_REUSED};

    const BODY: &str = "b0";
    const OTHER_BODY: &str = "b1";
    const PAID: &str = r#"{"id":"pay_1","status":"succeeded"}"#;

    /// An attempt at key `k` with body `BODY`, sent and answered at the
    /// given milliseconds, answered `201` with `PAID`.
    fn attempt(op: u64, sent_at: u64, answered_at: u64) -> Attempt {
        Attempt {
            op,
            tenant: "acme".into(),
            key: "k".into(),
            body_sha256: BODY.into(),
            sent_at,
            answered_at,
            status: Some(201),
            error_code: None,
            transport_error: None,
            response_body: Some(PAID.into()),
            region: Some("eu-west".into()),
            replayed: false,
        }
    }

    fn executed(op: u64, sent_at: u64, answered_at: u64) -> Attempt {
        attempt(op, sent_at, answered_at)
    }

    fn replayed(op: u64, sent_at: u64, answered_at: u64) -> Attempt {
        Attempt {
            replayed: true,
            ..attempt(op, sent_at, answered_at)
        }
    }

    fn timed_out(op: u64, sent_at: u64) -> Attempt {
        Attempt {
            status: None,
            transport_error: Some("timed out".into()),
            response_body: None,
            ..attempt(op, sent_at, sent_at + 10_000)
        }
    }

    fn answered(op: u64, sent_at: u64, status: u16, code: &str) -> Attempt {
        Attempt {
            status: Some(status),
            error_code: Some(code.into()),
            response_body: Some(format!(r#"{{"errorCode":"{code}"}}"#)),
            ..attempt(op, sent_at, sent_at + 5)
        }
    }

    fn mismatch(op: u64, sent_at: u64) -> Attempt {
        Attempt {
            body_sha256: OTHER_BODY.into(),
            ..answered(op, sent_at, 409, KEY_REUSED)
        }
    }

    fn log(attempts: Vec<Attempt>) -> ClientLog {
        ClientLog {
            operations: Vec::new(),
            attempts,
        }
    }

    fn the_violation(attempts: Vec<Attempt>) -> KeyViolation {
        let found = check(&log(attempts));
        assert_eq!(found.violations.len(), 1, "{found:#?}");
        assert!(found.undecided.is_empty(), "{found:#?}");
        found.violations[0].clone()
    }

    fn ops_of(violation: &KeyViolation) -> Vec<u64> {
        violation.history.iter().map(|e| e.op).collect()
    }

    fn holds(attempts: Vec<Attempt>) {
        let found = check(&log(attempts));
        assert!(found.holds(), "{found:#?}");
        assert!(found.undecided.is_empty(), "{found:#?}");
    }

    #[test]
    fn a_replay_answered_before_its_execution_was_sent_is_caught() {
        let v = the_violation(vec![executed(1, 100, 110), replayed(2, 50, 60)]);
        assert!(
            v.why.starts_with(
                "a replay answered before any execution of the key could have happened: op 2"
            ),
            "{v:#?}"
        );
        assert_eq!(ops_of(&v), [2, 1]);
    }

    #[test]
    fn two_different_answers_for_one_key_are_caught() {
        let other_bytes = Attempt {
            response_body: Some(r#"{"id":"pay_1","status":"succeeded" }"#.into()),
            ..replayed(2, 20, 30)
        };
        let v = the_violation(vec![
            executed(1, 0, 10),
            replayed(2, 15, 18),
            other_bytes,
            replayed(2, 40, 50),
        ]);
        assert!(v.why.starts_with("two different answers"), "{v:#?}");
        assert_eq!(v.history.len(), 2, "{v:#?}");
        assert_eq!(v.history[0].outcome, "201 executed");
        assert_eq!(v.history[1].sent_at, 20);
    }

    #[test]
    fn another_status_replayed_is_two_different_answers() {
        let declined = Attempt {
            status: Some(402),
            ..replayed(2, 20, 30)
        };
        let v = the_violation(vec![executed(1, 0, 10), declined]);
        assert!(v.why.starts_with("two different answers"), "{v:#?}");
    }

    #[test]
    fn two_executions_are_caught() {
        let v = the_violation(vec![executed(1, 0, 10), executed(2, 20, 30)]);
        assert!(v.why.starts_with("two executions: op 2"), "{v:#?}");
        assert_eq!(ops_of(&v), [1, 2]);
    }

    #[test]
    fn a_mismatch_on_a_key_never_executed_is_caught() {
        let v = the_violation(vec![mismatch(1, 0)]);
        assert!(
            v.why.starts_with(
                "a mismatch answered when no other request body could have executed under the key"
            ),
            "{v:#?}"
        );
        // Its own body timing out first changes nothing: had it executed,
        // the mismatch would be for the very body the key executed.
        let v = the_violation(vec![
            Attempt {
                body_sha256: OTHER_BODY.into(),
                ..timed_out(1, 0)
            },
            mismatch(1, 20),
        ]);
        assert_eq!(v.history.len(), 1, "{v:#?}");
        assert_eq!(v.history[0].outcome, "409 mismatch");
    }

    #[test]
    fn a_replay_of_another_body_is_caught() {
        let v = the_violation(vec![
            executed(1, 0, 10),
            Attempt {
                body_sha256: OTHER_BODY.into(),
                ..replayed(2, 20, 30)
            },
        ]);
        assert!(
            v.why
                .starts_with("a replay answered for a request body other than"),
            "{v:#?}"
        );
    }

    #[test]
    fn concurrent_attempts_may_take_effect_in_either_order() {
        // The replay was answered before the execution's answer arrived, but
        // after it was sent: the execution took effect in between.
        holds(vec![executed(1, 0, 100), replayed(2, 10, 50)]);
        // Equal milliseconds are concurrent.
        holds(vec![replayed(2, 10, 50), executed(1, 50, 60)]);
        holds(vec![
            executed(1, 0, 100),
            replayed(2, 10, 50),
            mismatch(3, 5),
            answered(4, 1, 409, "IDEMPOTENCY_REQUEST_IN_PROGRESS"),
        ]);
    }

    #[test]
    fn an_indeterminate_attempt_that_was_the_execution_holds() {
        holds(vec![
            timed_out(1, 0),
            answered(1, 20_000, 409, "IDEMPOTENCY_REQUEST_IN_PROGRESS"),
            replayed(1, 30_000, 30_010),
            mismatch(2, 40_000),
            replayed(3, 50_000, 50_010),
        ]);
        // It may take effect long after its answer was given up on.
        holds(vec![timed_out(1, 0), replayed(1, 50_000, 50_010)]);
    }

    #[test]
    fn an_indeterminate_attempt_that_was_not_the_execution_holds() {
        holds(vec![
            answered(1, 0, 503, "SERVICE_UNAVAILABLE"),
            answered(1, 10, 421, "MISDIRECTED"),
            executed(1, 20, 30),
            timed_out(2, 40),
            replayed(2, 60, 70),
        ]);
    }

    #[test]
    fn a_replay_binds_the_answer_of_an_indeterminate_execution() {
        let first = Attempt {
            response_body: Some(r#"{"id":"pay_7"}"#.into()),
            ..replayed(2, 100, 110)
        };
        holds(vec![timed_out(1, 0), first.clone(), first.clone()]);
        let v = the_violation(vec![timed_out(1, 0), first, replayed(3, 200, 210)]);
        assert!(v.why.starts_with("two different answers"), "{v:#?}");
    }

    #[test]
    fn a_history_whose_only_execution_was_indeterminate_holds() {
        holds(vec![timed_out(1, 0)]);
        holds(vec![
            answered(1, 0, 202, "PROVIDER_OUTCOME_UNKNOWN"),
            answered(1, 100, 500, "INTERNAL"),
            mismatch(2, 200),
        ]);
    }

    #[test]
    fn other_final_answers_have_no_effect_and_are_counted() {
        let found = check(&log(vec![
            answered(1, 0, 400, "VALIDATION_ERROR"),
            executed(2, 10, 20),
            answered(3, 30, 422, "UNPROCESSABLE"),
            timed_out(4, 40),
        ]));
        assert!(found.holds(), "{found:#?}");
        assert_eq!(
            (
                found.keys,
                found.attempts,
                found.indeterminate,
                found.without_effect
            ),
            (1, 4, 1, 2)
        );
    }

    #[test]
    fn keys_are_checked_on_their_own() {
        let elsewhere = |mut a: Attempt, tenant: &str, key: &str| {
            a.tenant = tenant.into();
            a.key = key.into();
            a
        };
        // Each key executed once: no two executions, although the same
        // body was sent under three keys.
        let found = check(&log(vec![
            executed(1, 0, 10),
            elsewhere(executed(2, 20, 30), "acme", "k2"),
            elsewhere(executed(3, 20, 30), "globex", "k"),
            elsewhere(replayed(4, 0, 5), "globex", "k3"),
        ]));
        assert_eq!(found.keys, 4);
        let broken: Vec<_> = found
            .violations
            .iter()
            .map(|v| (v.tenant.as_str(), v.key.as_str()))
            .collect();
        assert_eq!(broken, [("globex", "k3")]);
    }

    #[test]
    fn the_check_names_each_broken_key_once_with_its_smallest_history() {
        let mut attempts = vec![executed(1, 0, 10), executed(2, 20, 30)];
        attempts.extend((3..10).map(|op| replayed(op, op * 100, op * 100 + 5)));
        let result = check(&log(attempts)).as_check();
        assert_eq!(result.name, "linearizable");
        assert!(!result.passed);
        assert_eq!(result.violations.len(), 1, "{result:#?}");
        let v = &result.violations[0];
        assert!(
            v.what.starts_with("key k of tenant acme: two executions"),
            "{v:#?}"
        );
        let hash = history::short_hash(PAID);
        assert_eq!(
            v.evidence["history"],
            json!([
                format!("op 1 sent 0 answered 10: 201 executed (request b0, answer {hash})"),
                format!("op 2 sent 20 answered 30: 201 executed (request b0, answer {hash})"),
            ])
        );
        assert_eq!(v.evidence["answers"][&hash], PAID);
        assert!(
            result.notes[0].starts_with("1 scoped keys, 9 attempts"),
            "{result:#?}"
        );
    }

    /// 200 attempts sent within 200 ms, every one answered (if at all) after
    /// the last was sent: one executed, the rest timed out, in progress,
    /// unavailable or replayed; and perhaps one replay with another answer.
    fn hot_key(wrong_replay: bool) -> Vec<Attempt> {
        let mut attempts = Vec::new();
        for op in 0..200 {
            let sent = 1_000 + op;
            attempts.push(match op % 4 {
                _ if op == 100 => executed(op, sent, 5_000),
                0 => timed_out(op, sent),
                1 => answered(op, sent, 409, "IDEMPOTENCY_REQUEST_IN_PROGRESS"),
                2 => answered(op, sent, 503, "SERVICE_UNAVAILABLE"),
                _ => replayed(op, sent, 5_000 + op),
            });
        }
        if wrong_replay {
            attempts.push(Attempt {
                response_body: Some(r#"{"id":"pay_2"}"#.into()),
                ..replayed(999, 1_100, 6_000)
            });
        }
        attempts
    }

    #[test]
    fn twenty_thousand_keys_and_a_hot_key_of_two_hundred_concurrent_attempts() {
        let mut attempts = hot_key(false);
        for i in 0..20_000u64 {
            let key = format!("k{i}");
            let t = i * 3;
            for a in [
                answered(i, t, 503, "SERVICE_UNAVAILABLE"),
                executed(i, t + 1, t + 2),
                replayed(i + 100_000, t + 5, t + 6),
            ] {
                attempts.push(Attempt {
                    key: key.clone(),
                    ..a
                });
            }
        }
        let found = check(&log(attempts));
        assert!(found.holds(), "{:#?}", found.violations.first());
        assert!(found.undecided.is_empty());
        assert_eq!((found.keys, found.attempts), (20_001, 60_200));
    }

    #[test]
    fn a_hot_keys_one_wrong_replay_is_decided_and_shrunk() {
        let v = the_violation(hot_key(true));
        assert!(v.why.starts_with("two different answers"), "{v:#?}");
        assert_eq!(ops_of(&v), [100, 999], "{v:#?}");
    }

    #[test]
    fn a_key_too_large_for_the_budget_is_undecided_not_violated() {
        let found = check_within(&log(hot_key(true)), 1);
        assert!(found.holds());
        assert_eq!(found.undecided, [("acme".to_owned(), "k".to_owned())]);
        let result = found.as_check();
        assert!(result.passed);
        assert!(
            result.notes[1].contains("1 keys undecided")
                && result.notes[1].contains("within 1 explored states")
                && result.notes[1].contains("k of tenant acme"),
            "{result:#?}"
        );
    }
}
