//! The idempotence workload's checker ([`crate::resend`]'s resends): pure,
//! so it is tested against planted histories.
//!
//! | resend | right | wrong (a violation) |
//! |---|---|---|
//! | same body | the key's first stored answer, status and body byte for byte, marked replayed when that answer came before the resend was sent; with no answer seen before it, any one stored answer — the same one every attempt of the key got | other bytes; another payment id; a final answer that is no stored answer (`409 …REUSED…`, `400`) |
//! | other body | `409 IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST` | a success or a stored answer (`201`, `402`): replayed or executed; any other final answer |
//!
//! Beside the resends' own answers, each resent key's payments are counted
//! in every regional database (by the key's merchant reference): two
//! payment ids for one key is a resend that created a second payment.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::client_log::{Attempt, ClientLog, Intent, KEY_REUSED, Operation};
use crate::evidence::Evidence;
use crate::verdict::{CheckResult, Violation};

/// How many resends of each kind were sent and judged, for the report's
/// headline and `report.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResendCounts {
    /// Same key, same bytes.
    pub same_body: usize,
    /// Of those, with a final answer (judged).
    pub same_body_answered: usize,
    /// Same-body resends sent before their original's stored answer was
    /// seen (in flight, or never answered): the service decides which
    /// attempt executes.
    pub same_body_before_answer: usize,
    /// Same key, another body.
    pub other_body: usize,
    pub other_body_answered: usize,
    /// Resends whose final answer came from another region than their
    /// original's.
    pub answered_by_another_region: usize,
    pub violations: usize,
}

impl ResendCounts {
    /// `N same-body (M answered), K other-body (L answered) resends`.
    pub fn summary(&self) -> String {
        format!(
            "{} same-body resends ({} answered, {} sent before the first answer), {} other-body resends ({} answered), {} answered by another region",
            self.same_body,
            self.same_body_answered,
            self.same_body_before_answer,
            self.other_body,
            self.other_body_answered,
            self.answered_by_another_region
        )
    }
}

fn attempt_evidence(a: &Attempt) -> serde_json::Value {
    json!({
        "op": a.op, "key": a.key, "sentAt": a.sent_at, "answeredAt": a.answered_at,
        "status": a.status, "errorCode": a.error_code, "region": a.region,
        "replayed": a.replayed, "body": a.response_body,
    })
}

fn violation(what: String, evidence: serde_json::Value) -> Violation {
    Violation { what, evidence }
}

/// The stored answers under `op`'s key with `op`'s body, by every
/// operation but `op` itself, in the order they were sent.
fn other_stored_answers<'a>(log: &'a ClientLog, op: &'a Operation) -> Vec<&'a Attempt> {
    log.attempts
        .iter()
        .filter(|a| {
            a.op != op.id
                && a.tenant == op.tenant
                && a.key == op.key
                && a.body_sha256 == op.body_sha256
                && a.is_stored_answer()
        })
        .collect()
}

/// Judges every resend of `evidence`'s log; the check is named
/// `idempotent resends`.
pub fn check(evidence: &Evidence) -> (CheckResult, ResendCounts) {
    let log = &evidence.log;
    let mut counts = ResendCounts::default();
    let mut violations = Vec::new();
    let mut resent_keys: BTreeSet<(&str, &str, &str)> = BTreeSet::new();
    for op in &log.operations {
        let Intent::Resend { of, same_body } = op.intent else {
            continue;
        };
        resent_keys.insert((&op.tenant, &op.key, &op.merchant_reference));
        let answer = log.final_answer(op.id);
        let original_region = log
            .final_answer(of)
            .and_then(|a| a.region.as_deref())
            .or_else(|| log.attempts_of(of).find_map(|a| a.region.as_deref()));
        if let (Some(answer), Some(original)) = (answer, original_region)
            && answer.region.as_deref().is_some_and(|r| r != original)
        {
            counts.answered_by_another_region += 1;
        }
        if same_body {
            counts.same_body += 1;
            let sent_at = log.attempts_of(op.id).map(|a| a.sent_at).min();
            let others = other_stored_answers(log, op);
            let reference = others.first().copied();
            let answered_before = others
                .iter()
                .find(|a| sent_at.is_some_and(|sent| a.answered_at < sent))
                .copied();
            if answered_before.is_none() {
                counts.same_body_before_answer += 1;
            }
            let Some(answer) = answer else {
                continue;
            };
            counts.same_body_answered += 1;
            let what = match reference {
                _ if !answer.is_stored_answer() => Some(format!(
                    "answered {}, not the key's stored answer",
                    answer.error_class()
                )),
                Some(first) if first.payment_id() != answer.payment_id() => Some(format!(
                    "answered with payment {:?}, the key's first answer named {:?}: a second payment",
                    answer.payment_id(),
                    first.payment_id()
                )),
                Some(first)
                    if first.status != answer.status
                        || first.response_body != answer.response_body =>
                {
                    Some(format!(
                        "answered {} with other bytes than the key's first {}",
                        answer.error_class(),
                        first.error_class()
                    ))
                }
                _ if answered_before.is_some() && !answer.replayed => Some(format!(
                    "answered {} without Idempotent-Replayed: true, after the key's answer was given",
                    answer.error_class()
                )),
                _ => None,
            };
            if let Some(what) = what {
                violations.push(violation(
                    format!("same-body resend of key {} {what}", op.key),
                    json!({ "first": reference.map(attempt_evidence), "resend": attempt_evidence(answer) }),
                ));
            }
        } else {
            counts.other_body += 1;
            for executed in log.attempts_of(op.id).filter(|a| a.is_stored_answer()) {
                violations.push(violation(
                    format!(
                        "other-body resend of key {} got {}: another request's answer replayed or executed",
                        op.key,
                        executed.error_class()
                    ),
                    json!({ "request": op.body, "answer": attempt_evidence(executed) }),
                ));
            }
            let Some(answer) = answer else {
                continue;
            };
            counts.other_body_answered += 1;
            let loud =
                answer.status == Some(409) && answer.error_code.as_deref() == Some(KEY_REUSED);
            if !loud && !answer.is_stored_answer() {
                violations.push(violation(
                    format!(
                        "other-body resend of key {} got {} instead of 409 {KEY_REUSED}",
                        op.key,
                        answer.error_class()
                    ),
                    json!({ "request": op.body, "answer": attempt_evidence(answer) }),
                ));
            }
        }
    }
    // One payment per resent key, in every database together.
    let mut ids: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
    for row in &evidence.payments {
        ids.entry((&row.tenant_id, &row.merchant_reference))
            .or_default()
            .insert(&row.id);
    }
    for (tenant, key, reference) in &resent_keys {
        if let Some(payments) = ids.get(&(*tenant, *reference))
            && payments.len() > 1
        {
            violations.push(violation(
                format!(
                    "resent key {key} of tenant {tenant} has {} payments: a resend created a second payment",
                    payments.len()
                ),
                json!({ "key": key, "merchantReference": reference, "payments": payments }),
            ));
        }
    }
    counts.violations = violations.len();
    let notes = vec![counts.summary()];
    (
        CheckResult::new("idempotent resends", "I1, I2, I3", violations, notes),
        counts,
    )
}
