//! The invariant checker: pure functions from [`Evidence`] to named checks,
//! each with the violations it found and the evidence for each. Nothing here
//! does I/O, so every check is unit-tested against planted violations. A
//! check's [`CheckResult`] and its [`Violation`]s are [`crate::verdict`]'s,
//! re-exported here.
//!
//! | check | invariant | looks at |
//! |---|---|---|
//! | [`evidence_complete`] | (all) | the gaps: sources that could not be read |
//! | [`no_duplicate_charge`] | I1 | provider ledger (+ payments for the tenant) |
//! | [`no_duplicate_payment`] | I1 | payments of every region, client log, store records |
//! | [`payments_answered_201`] | I2, I4 | the final answer of every plain payment |
//! | [`no_acknowledged_payment_lost`] | I4 | every `201` the clients saw vs payments, ledger and raft-store records |
//! | [`faithful_replay`] | I2 | every stored answer (`201`, `402`, `409 DUPLICATE_MERCHANT_REFERENCE`) under one key, replays, stored responses |
//! | [`loud_mismatch`] | I3 | the reused-key-different-body operations |
//! | [`keyless_duplicates_at_most_one_payment`] | I1 (case 6) | duplicate groups vs payments |
//! | `idempotent resends` ([`crate::idempotence::check`]) | I1, I2, I3 | the idempotence workload's resends, the resent keys' payments |
//! | `linearizable` ([`Linearizability::as_check`](crate::linearizability::Linearizability::as_check)) | I1, I2, I3 | every attempt of the client log, each scoped key's history on its own ([`crate::linearizability`]) |

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::client_log::{Attempt, DUPLICATE_REFERENCE, Intent, KEY_REUSED};
use crate::evidence::{BusinessKey, Evidence, PaymentRow, StoreRecord, payment_of_provider_key};
use crate::linearizability;
pub use crate::verdict::{CheckResult, Violation};

fn violation(what: impl Into<String>, evidence: serde_json::Value) -> Violation {
    Violation {
        what: what.into(),
        evidence,
    }
}

/// Every check, in report order.
pub fn check_all(evidence: &Evidence) -> Vec<CheckResult> {
    check_all_with(evidence, &linearizability::check(&evidence.log))
}

/// [`check_all`] with the linearizability verdict already searched (the
/// chaos report keeps the verdict itself, so it searches once).
pub fn check_all_with(
    evidence: &Evidence,
    linearizability: &linearizability::Linearizability,
) -> Vec<CheckResult> {
    vec![
        evidence_complete(evidence),
        no_duplicate_charge(evidence),
        no_duplicate_payment(evidence),
        payments_answered_201(evidence),
        no_acknowledged_payment_lost(evidence),
        faithful_replay(evidence),
        loud_mismatch(evidence),
        keyless_duplicates_at_most_one_payment(evidence),
        crate::idempotence::check(evidence).0,
        // `linearizable`: I1–I3 together, as the clients saw them (see
        // `Linearizability::as_check`).
        linearizability.as_check(),
    ]
}

/// The condition for trusting every other check: each source was read. A
/// check that finds nothing wrong in a database it could not open proves
/// nothing (the missing payment may be there, the duplicate too), so a gap
/// fails the drill instead of letting it say every invariant held.
pub fn evidence_complete(evidence: &Evidence) -> CheckResult {
    let violations = evidence
        .gaps
        .iter()
        .map(|gap| {
            violation(
                format!("could not read {gap}: the checks cannot vouch for it"),
                json!({ "gap": gap }),
            )
        })
        .collect();
    CheckResult::new(
        "evidence complete",
        "(all)",
        violations,
        vec![evidence.counts()],
    )
}

/// Payment rows by id: the same id materialized in several regions is one
/// payment.
fn payments_by_id(evidence: &Evidence) -> BTreeMap<&str, Vec<&PaymentRow>> {
    let mut by_id: BTreeMap<&str, Vec<&PaymentRow>> = BTreeMap::new();
    for row in &evidence.payments {
        by_id.entry(row.id.as_str()).or_default().push(row);
    }
    by_id
}

fn business_key_of(row: &PaymentRow) -> BusinessKey {
    BusinessKey {
        tenant: row.tenant_id.clone(),
        account_id: row.account_id.clone(),
        merchant_reference: row.merchant_reference.clone(),
    }
}

fn attempt_evidence(a: &Attempt) -> serde_json::Value {
    json!({
        "op": a.op, "tenant": a.tenant, "key": a.key, "sentAt": a.sent_at,
        "status": a.status, "errorCode": a.error_code, "region": a.region,
        "body": a.response_body,
    })
}

/// I1 at the provider: at most one successful charge per provider key, per
/// payment and per business key `(tenant, account, merchant reference)`.
/// The tenant comes from the payment's row, or for a charge whose payment
/// is in no database, from another payment of the same account.
pub fn no_duplicate_charge(evidence: &Evidence) -> CheckResult {
    let mut violations = Vec::new();
    let succeeded: Vec<_> = evidence.ledger.iter().filter(|c| c.succeeded()).collect();
    let rows = payments_by_id(evidence);

    let mut tenant_of_account: BTreeMap<&str, String> = BTreeMap::new();
    for row in &evidence.payments {
        tenant_of_account
            .entry(row.account_id.as_str())
            .or_insert_with(|| row.tenant_id.clone());
    }
    let mut by_key: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut by_payment: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut by_business_key: BTreeMap<(String, &str, &str), Vec<&str>> = BTreeMap::new();
    for charge in &succeeded {
        by_key
            .entry(&charge.idempotency_key)
            .or_default()
            .push(&charge.id);
        let payment = payment_of_provider_key(&charge.idempotency_key);
        if let Some(payment) = payment {
            by_payment.entry(payment).or_default().push(&charge.id);
        }
        // A charge whose payment is in no database (itself suspicious) is
        // put with its account's tenant, so it still meets its twin.
        let tenant = payment
            .and_then(|p| rows.get(p))
            .map(|r| r[0].tenant_id.clone())
            .or_else(|| tenant_of_account.get(charge.account_id.as_str()).cloned())
            .unwrap_or_else(|| "?".to_owned());
        by_business_key
            .entry((tenant, &charge.account_id, &charge.merchant_reference))
            .or_default()
            .push(&charge.idempotency_key);
    }
    for (key, charges) in by_key.iter().filter(|(_, c)| c.len() > 1) {
        violations.push(violation(
            format!("provider key {key} charged {} times", charges.len()),
            json!({ "providerKey": key, "charges": charges }),
        ));
    }
    for (payment, charges) in by_payment.iter().filter(|(_, c)| c.len() > 1) {
        violations.push(violation(
            format!("payment {payment} charged {} times", charges.len()),
            json!({ "paymentId": payment, "charges": charges }),
        ));
    }
    for ((tenant, account, reference), keys) in by_business_key.iter().filter(|(_, k)| k.len() > 1)
    {
        violations.push(violation(
            format!(
                "merchant reference {reference} of account {account} (tenant {tenant}) charged {} times",
                keys.len()
            ),
            json!({ "tenant": tenant, "accountId": account, "merchantReference": reference, "providerKeys": keys }),
        ));
    }
    CheckResult::new(
        "no duplicate charge",
        "I1",
        violations,
        vec![format!(
            "{} ledger entries, {} succeeded",
            evidence.ledger.len(),
            succeeded.len()
        )],
    )
}

/// I1 in the databases: at most one payment per business key across every
/// region (ids compared: one id in two regions is one payment), at most one
/// payment per scoped key as the clients saw it (every answer naming one),
/// and at most one payment per business key among raft-store's records.
pub fn no_duplicate_payment(evidence: &Evidence) -> CheckResult {
    let mut violations = Vec::new();
    let rows = payments_by_id(evidence);

    let mut by_business_key: BTreeMap<BusinessKey, BTreeSet<&str>> = BTreeMap::new();
    for (id, copies) in &rows {
        by_business_key
            .entry(business_key_of(copies[0]))
            .or_default()
            .insert(id);
    }
    for (bk, ids) in by_business_key.iter().filter(|(_, ids)| ids.len() > 1) {
        let evidence_rows: Vec<_> = ids.iter().flat_map(|id| rows[id].iter()).collect();
        violations.push(violation(
            format!(
                "{} payments for merchant reference {} of account {} (tenant {})",
                ids.len(),
                bk.merchant_reference,
                bk.account_id,
                bk.tenant
            ),
            json!({ "businessKey": bk, "rows": evidence_rows }),
        ));
    }

    // Every answer that names a payment: `id` of a 201, `paymentId` of a
    // 202, 402 or 409 duplicate. One key, one payment, whatever the answer.
    let mut by_scoped_key: BTreeMap<(&str, &str), BTreeMap<String, &Attempt>> = BTreeMap::new();
    for attempt in &evidence.log.attempts {
        if let Some(id) = attempt.payment_id() {
            by_scoped_key
                .entry((&attempt.tenant, &attempt.key))
                .or_default()
                .entry(id)
                .or_insert(attempt);
        }
    }
    for ((tenant, key), ids) in by_scoped_key.iter().filter(|(_, ids)| ids.len() > 1) {
        violations.push(violation(
            format!(
                "key {key} of tenant {tenant} was answered with {} different payments",
                ids.len()
            ),
            json!({ "tenant": tenant, "key": key,
                    "answers": ids.values().map(|a| attempt_evidence(a)).collect::<Vec<_>>() }),
        ));
    }

    let mut notes = vec![format!(
        "{} payment rows, {} distinct payments",
        evidence.payments.len(),
        rows.len()
    )];
    match &evidence.store_records {
        Some(records) => {
            let mut held: BTreeMap<&BusinessKey, BTreeSet<&str>> = BTreeMap::new();
            for record in records {
                if let (Some(bk), Some(id)) = (&record.business_key, &record.payment_id) {
                    held.entry(bk).or_default().insert(id);
                }
            }
            for (bk, ids) in held.iter().filter(|(_, ids)| ids.len() > 1) {
                violations.push(violation(
                    format!(
                        "raft-store holds {} payments for merchant reference {} of account {}",
                        ids.len(),
                        bk.merchant_reference,
                        bk.account_id
                    ),
                    json!({ "businessKey": bk, "paymentIds": ids }),
                ));
            }
            notes.push(format!("{} raft-store records", records.len()));
        }
        None => notes.push("raft-store records not available: not compared".to_owned()),
    }
    CheckResult::new("no duplicate payment", "I1", violations, notes)
}

/// A plain payment ([`Intent::Payment`]) is a fresh key with a valid body for
/// an account the provider never declines ([`crate::load::account_of`]), so
/// `201` is its only correct final answer. Any other final answer — `409`
/// saying the key was reused or the reference is taken, `400`/`422` for the
/// very bytes that succeed elsewhere, a `402` — is the service forgetting or
/// mistaking what it was asked (retryable answers are not final: an
/// operation still retrying when the drill ended is noted, not condemned).
pub fn payments_answered_201(evidence: &Evidence) -> CheckResult {
    let mut violations = Vec::new();
    let (mut sent, mut unanswered) = (0, 0);
    for op in &evidence.log.operations {
        if op.intent != Intent::Payment {
            continue;
        }
        sent += 1;
        match evidence.log.final_answer(op.id) {
            None => unanswered += 1,
            Some(a) if a.status == Some(201) => {}
            Some(a) => violations.push(violation(
                format!(
                    "payment under key {} of tenant {} ended with {} instead of 201",
                    op.key,
                    op.tenant,
                    a.error_class()
                ),
                json!({ "request": op.body, "answer": attempt_evidence(a) }),
            )),
        }
    }
    CheckResult::new(
        "every payment answered 201",
        "I2, I4",
        violations,
        vec![format!(
            "{sent} payments, {unanswered} unanswered when the drill ended"
        )],
    )
}

/// I4: every `201` a client saw names a payment that some regional database
/// holds, that raft-store holds finished under the key it was sent with
/// (when its records were read) and, when it says `succeeded`, that the
/// provider charged.
pub fn no_acknowledged_payment_lost(evidence: &Evidence) -> CheckResult {
    let mut violations = Vec::new();
    let rows = payments_by_id(evidence);
    let records = evidence.store_records.as_ref().map(|r| records_by_scope(r));
    let charged: BTreeSet<&str> = evidence
        .ledger
        .iter()
        .filter(|c| c.succeeded())
        .filter_map(|c| payment_of_provider_key(&c.idempotency_key))
        .collect();
    let mut seen = BTreeSet::new();
    for attempt in evidence
        .log
        .attempts
        .iter()
        .filter(|a| a.status == Some(201))
    {
        let Some(id) = attempt.payment_id() else {
            violations.push(violation(
                "a 201 without a payment id",
                attempt_evidence(attempt),
            ));
            continue;
        };
        if !seen.insert(id.clone()) {
            continue;
        }
        if !rows.contains_key(id.as_str()) {
            violations.push(violation(
                format!("acknowledged payment {id} is in no regional database"),
                attempt_evidence(attempt),
            ));
        }
        if attempt.payment_status().as_deref() == Some("succeeded")
            && !charged.contains(id.as_str())
        {
            violations.push(violation(
                format!(
                    "acknowledged payment {id} succeeded but the provider has no charge for it"
                ),
                attempt_evidence(attempt),
            ));
        }
        if let Some(records) = &records {
            let held = records
                .get(&(attempt.tenant.as_str(), attempt.key.as_str()))
                .map_or(&[][..], Vec::as_slice);
            if !held
                .iter()
                .any(|r| r.is_final() && r.payment_id.as_deref() == Some(id.as_str()))
            {
                violations.push(violation(
                    format!(
                        "acknowledged payment {id} has no finished raft-store record under key {} of tenant {}",
                        attempt.key, attempt.tenant
                    ),
                    json!({ "answer": attempt_evidence(attempt), "records": held }),
                ));
            }
        }
    }
    let mut notes = vec![format!("{} acknowledged payments", seen.len())];
    if records.is_none() {
        notes.push("raft-store records not available: not compared".to_owned());
    }
    notes.extend(
        evidence
            .gaps
            .iter()
            .map(|g| format!("could not read: {g} (a missing payment may be there)")),
    );
    CheckResult::new("no acknowledged payment lost", "I4", violations, notes)
}

/// raft-store's records by `(tenant, key)`: one principal per tenant in a
/// drill, so usually one record each.
fn records_by_scope(records: &[StoreRecord]) -> BTreeMap<(&str, &str), Vec<&StoreRecord>> {
    let mut by_scope: BTreeMap<(&str, &str), Vec<&StoreRecord>> = BTreeMap::new();
    for r in records {
        by_scope.entry((&r.tenant, &r.key)).or_default().push(r);
    }
    by_scope
}

/// I2: every stored answer (`201`, `402`, `409 DUPLICATE_MERCHANT_REFERENCE`)
/// under one scoped key carries the first one's status and body byte for
/// byte; every replay operation got that answer, marked
/// `Idempotent-Replayed: true`; raft-store's stored response is that answer.
pub fn faithful_replay(evidence: &Evidence) -> CheckResult {
    let mut violations = Vec::new();
    let mut first: BTreeMap<(&str, &str), &Attempt> = BTreeMap::new();
    for attempt in evidence
        .log
        .attempts
        .iter()
        .filter(|a| a.is_stored_answer())
    {
        let reference = *first
            .entry((&attempt.tenant, &attempt.key))
            .or_insert(attempt);
        let what = if reference.status != attempt.status {
            format!(
                "answered {} after {}",
                attempt.error_class(),
                reference.error_class()
            )
        } else if reference.response_body != attempt.response_body {
            format!("answered {} with a different body", attempt.error_class())
        } else {
            continue;
        };
        violations.push(violation(
            format!("key {} of tenant {} {what}", attempt.key, attempt.tenant),
            json!({ "first": attempt_evidence(reference), "later": attempt_evidence(attempt) }),
        ));
    }

    let mut unanswered = 0;
    let mut replays = 0;
    for op in &evidence.log.operations {
        let Intent::Replay { of } = op.intent else {
            continue;
        };
        replays += 1;
        let original = evidence.log.attempts_of(of).find(|a| a.is_stored_answer());
        let Some(answer) = evidence.log.final_answer(op.id) else {
            unanswered += 1;
            continue;
        };
        match original {
            Some(original) if answer.status != original.status => violations.push(violation(
                format!(
                    "replay of key {} answered {} instead of the original {}",
                    op.key,
                    answer.error_class(),
                    original.error_class()
                ),
                attempt_evidence(answer),
            )),
            Some(_) if !answer.replayed => violations.push(violation(
                format!("replay of key {} lacks Idempotent-Replayed: true", op.key),
                attempt_evidence(answer),
            )),
            _ => {}
        }
    }

    let mut notes = vec![format!(
        "{} keys with a stored answer, {replays} replays sent, {unanswered} unanswered when the drill ended",
        first.len()
    )];
    match &evidence.store_records {
        Some(records) => {
            let by_scope = records_by_scope(records);
            for ((tenant, key), reference) in &first {
                // Several records under one (tenant, key) cannot be told
                // apart (one principal per tenant in a drill), so are not
                // compared.
                let Some([record]) = by_scope.get(&(*tenant, *key)).map(Vec::as_slice) else {
                    continue;
                };
                let Some(stored_status) = record.response_status else {
                    continue;
                };
                if Some(stored_status) != reference.status
                    || record.response_body != reference.response_body
                {
                    violations.push(violation(
                        format!("raft-store's stored response for key {key} of tenant {tenant} differs from the answer first sent"),
                        json!({ "sent": attempt_evidence(reference),
                                "stored": { "status": stored_status, "body": record.response_body } }),
                    ));
                }
            }
        }
        None => {
            notes.push("raft-store records not available: stored responses not compared".to_owned())
        }
    }
    CheckResult::new("faithful replay", "I2", violations, notes)
}

/// I3: a key reused with a different body is answered `409
/// IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST`: never a replay, never an
/// execution.
pub fn loud_mismatch(evidence: &Evidence) -> CheckResult {
    let mut violations = Vec::new();
    let (mut sent, mut unanswered) = (0, 0);
    for op in &evidence.log.operations {
        if !matches!(op.intent, Intent::MismatchedBody { .. }) {
            continue;
        }
        sent += 1;
        for success in evidence.log.attempts_of(op.id).filter(|a| a.is_success()) {
            violations.push(violation(
                format!(
                    "key {} reused with a different body got {}",
                    op.key,
                    success.error_class()
                ),
                json!({ "request": op.body, "answer": attempt_evidence(success) }),
            ));
        }
        match evidence.log.final_answer(op.id) {
            None => unanswered += 1,
            Some(a) if a.is_success() => {} // reported above
            Some(a) if a.status == Some(409) && a.error_code.as_deref() == Some(KEY_REUSED) => {}
            Some(a) => violations.push(violation(
                format!(
                    "key {} reused with a different body got {} instead of 409 {KEY_REUSED}",
                    op.key,
                    a.error_class()
                ),
                json!({ "request": op.body, "answer": attempt_evidence(a) }),
            )),
        }
    }
    CheckResult::new(
        "loud mismatch",
        "I3",
        violations,
        vec![format!(
            "{sent} reused-key requests, {unanswered} unanswered when the drill ended"
        )],
    )
}

/// I1 for duplicates sent without reusing the key: per group, at most one
/// payment (in the answers and in every database); the others are `409
/// DUPLICATE_MERCHANT_REFERENCE` naming that payment.
pub fn keyless_duplicates_at_most_one_payment(evidence: &Evidence) -> CheckResult {
    let mut violations = Vec::new();
    let rows = payments_by_id(evidence);
    let mut groups: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for op in &evidence.log.operations {
        if let Intent::KeylessDuplicate { group } = op.intent {
            groups.entry(group).or_default().push(op.id);
        }
    }
    for (group, ops) in &groups {
        let Some(first_op) = evidence.log.operation(ops[0]) else {
            continue;
        };
        let created: BTreeSet<String> = ops
            .iter()
            .flat_map(|op| evidence.log.attempts_of(*op))
            .filter(|a| a.status == Some(201))
            .filter_map(Attempt::payment_id)
            .collect();
        if created.len() > 1 {
            violations.push(violation(
                format!(
                    "duplicate group {group} (merchant reference {}) created {} payments",
                    first_op.merchant_reference,
                    created.len()
                ),
                json!({ "group": group, "paymentIds": created }),
            ));
        }
        let in_databases: BTreeSet<&str> = rows
            .iter()
            .filter(|(_, copies)| {
                copies[0].tenant_id == first_op.tenant
                    && copies[0].account_id == first_op.account_id
                    && copies[0].merchant_reference == first_op.merchant_reference
            })
            .map(|(id, _)| *id)
            .collect();
        if in_databases.len() > 1 {
            violations.push(violation(
                format!(
                    "duplicate group {group} (merchant reference {}) has {} payments in the databases",
                    first_op.merchant_reference,
                    in_databases.len()
                ),
                json!({ "group": group, "paymentIds": in_databases }),
            ));
        }
        for op in ops {
            let Some(answer) = evidence.log.final_answer(*op) else {
                continue;
            };
            match (answer.status, answer.error_code.as_deref()) {
                (Some(201), _) => {}
                (Some(409), Some(DUPLICATE_REFERENCE)) => {
                    let named = answer.payment_id();
                    let consistent = match (&named, created.iter().next()) {
                        (Some(named), Some(created)) => named == created,
                        (Some(named), None) => rows.contains_key(named.as_str()),
                        (None, _) => false,
                    };
                    if !consistent {
                        violations.push(violation(
                            format!(
                                "duplicate group {group}: 409 names payment {named:?}, not the group's payment {created:?}"
                            ),
                            attempt_evidence(answer),
                        ));
                    }
                }
                _ => violations.push(violation(
                    format!(
                        "duplicate group {group}: unexpected answer {}",
                        answer.error_class()
                    ),
                    attempt_evidence(answer),
                )),
            }
        }
    }
    CheckResult::new(
        "keyless duplicates make at most one payment",
        "I1",
        violations,
        vec![format!("{} duplicate groups", groups.len())],
    )
}
