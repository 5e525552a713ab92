//! The invariant checker against planted violations: a clean drill passes
//! every check, and each planted violation is caught by the check that owns
//! it, with evidence.

use once_drill::check::{self, CheckResult};
use once_drill::client_log::{Attempt, ClientLog, Intent, Operation};
use once_drill::evidence::{BusinessKey, Charge, Evidence, PaymentRow, StoreRecord};

const ACCOUNT: &str = "acc_drill_acme";

fn payment_body(id: &str, reference: &str, created: &str) -> String {
    format!(
        r#"{{"object":"payment","id":"{id}","status":"succeeded","accountId":"{ACCOUNT}","amount":{{"value":"10.00","currency":"EUR","minorUnits":1000}},"merchantReference":"{reference}","channel":"web","region":"eu-west","createdAt":"{created}"}}"#
    )
}

fn operation(id: u64, intent: Intent, key: &str, reference: &str, amount: &str) -> Operation {
    let body = format!(
        r#"{{"accountId":"{ACCOUNT}","amount":"{amount}","currency":"EUR","merchantReference":"{reference}"}}"#
    );
    Operation {
        id,
        intent,
        tenant: "acme".into(),
        key: key.into(),
        account_id: ACCOUNT.into(),
        merchant_reference: reference.into(),
        body_sha256: once_drill::client_log::body_hash(body.as_bytes()),
        body,
    }
}

fn answer(
    op: &Operation,
    at: u64,
    status: Option<u16>,
    code: Option<&str>,
    body: Option<String>,
) -> Attempt {
    Attempt {
        op: op.id,
        tenant: op.tenant.clone(),
        key: op.key.clone(),
        body_sha256: op.body_sha256.clone(),
        sent_at: at,
        answered_at: at + 5,
        status,
        error_code: code.map(str::to_owned),
        transport_error: status.is_none().then(|| "connection refused".to_owned()),
        response_body: body,
        region: Some("eu-west".into()),
        replayed: false,
    }
}

fn row(database: &str, id: &str, reference: &str) -> PaymentRow {
    PaymentRow {
        database: database.into(),
        id: id.into(),
        tenant_id: "acme".into(),
        account_id: ACCOUNT.into(),
        merchant_reference: reference.into(),
        amount_minor: 1000,
        currency: "EUR".into(),
        status: "succeeded".into(),
        provider_key: format!("provider_payment_{id}"),
        region: "eu-west".into(),
    }
}

fn charge(payment: &str, reference: &str) -> Charge {
    Charge {
        id: format!("ch_{payment}"),
        idempotency_key: format!("provider_payment_{payment}"),
        status: "succeeded".into(),
        decline_code: None,
        account_id: ACCOUNT.into(),
        amount_minor: 1000,
        currency: "EUR".into(),
        merchant_reference: reference.into(),
        requests: 1,
    }
}

/// A drill where everything went right: a payment that needed a retry, its
/// replay, a reused key with another body, a pair of duplicates and the
/// final replay of the rejected one; the payment materialized in two
/// regions, and raft-store holds every finished key.
fn clean() -> Evidence {
    let first = operation(1, Intent::Payment, "k1", "order-1", "10.00");
    let replay = Operation {
        id: 2,
        intent: Intent::Replay { of: 1 },
        ..first.clone()
    };
    let mismatch = operation(
        3,
        Intent::MismatchedBody { of: 1 },
        "k1",
        "order-1",
        "10.01",
    );
    let dup_a = operation(
        4,
        Intent::KeylessDuplicate { group: 100 },
        "k4",
        "dup-1",
        "25.00",
    );
    let dup_b = operation(
        5,
        Intent::KeylessDuplicate { group: 100 },
        "k5",
        "dup-1",
        "25.00",
    );
    let dup_b_again = Operation {
        id: 6,
        intent: Intent::Replay { of: 5 },
        ..dup_b.clone()
    };
    let body_1 = payment_body("pay_1", "order-1", "2026-11-29T20:06:36.803Z");
    let body_2 = payment_body("pay_2", "dup-1", "2026-11-29T20:06:37.000Z");
    let duplicate_body = r#"{"errorCode":"DUPLICATE_MERCHANT_REFERENCE","paymentId":"pay_2"}"#;
    let mut replayed = answer(&replay, 300, Some(201), None, Some(body_1.clone()));
    replayed.replayed = true;
    let mut duplicate_replayed = answer(
        &dup_b_again,
        900,
        Some(409),
        Some("DUPLICATE_MERCHANT_REFERENCE"),
        Some(duplicate_body.into()),
    );
    duplicate_replayed.replayed = true;
    let attempts = vec![
        answer(
            &first,
            100,
            Some(503),
            Some("SERVICE_UNAVAILABLE"),
            Some("{}".into()),
        ),
        answer(&first, 200, Some(201), None, Some(body_1.clone())),
        replayed,
        answer(
            &mismatch,
            400,
            Some(409),
            Some("IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST"),
            Some(r#"{"errorCode":"IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST"}"#.into()),
        ),
        answer(&dup_a, 500, Some(201), None, Some(body_2.clone())),
        answer(
            &dup_b,
            500,
            Some(409),
            Some("DUPLICATE_MERCHANT_REFERENCE"),
            Some(duplicate_body.into()),
        ),
        duplicate_replayed,
    ];
    Evidence {
        log: ClientLog {
            operations: vec![first, replay, mismatch, dup_a, dup_b, dup_b_again],
            attempts,
        },
        payments: vec![
            row("eu-west", "pay_1", "order-1"),
            row("us-east", "pay_1", "order-1"),
            row("eu-west", "pay_2", "dup-1"),
        ],
        ledger: vec![charge("pay_1", "order-1"), charge("pay_2", "dup-1")],
        store_records: Some(vec![
            completed("k1", "pay_1", "order-1", body_1),
            completed("k4", "pay_2", "dup-1", body_2),
            StoreRecord {
                tenant: "acme".into(),
                principal: "drill".into(),
                key: "k5".into(),
                status: "FailedReplayable".into(),
                payment_id: None,
                business_key: None,
                response_status: Some(409),
                response_body: Some(duplicate_body.into()),
            },
        ]),
        store_member: Some("http://127.0.0.1:7001 (leader)".into()),
        gaps: Vec::new(),
    }
}

fn completed(key: &str, payment: &str, reference: &str, body: String) -> StoreRecord {
    StoreRecord {
        tenant: "acme".into(),
        principal: "drill".into(),
        key: key.into(),
        status: "Completed".into(),
        payment_id: Some(payment.into()),
        business_key: Some(BusinessKey {
            tenant: "acme".into(),
            account_id: ACCOUNT.into(),
            merchant_reference: reference.into(),
        }),
        response_status: Some(201),
        response_body: Some(body),
    }
}

fn attempt_of(evidence: &mut Evidence, op: u64) -> &mut Attempt {
    evidence
        .log
        .attempts
        .iter_mut()
        .rfind(|a| a.op == op)
        .unwrap()
}

fn failed(results: &[CheckResult]) -> Vec<&str> {
    results
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name.as_str())
        .collect()
}

#[test]
fn a_clean_drill_passes_every_check() {
    let results = check::check_all(&clean());
    assert_eq!(failed(&results), Vec::<&str>::new(), "{results:#?}");
    assert_eq!(results.len(), 10);
}

#[test]
fn a_second_charge_for_one_merchant_reference_is_caught() {
    let mut evidence = clean();
    evidence.ledger.push(charge("pay_9", "order-1"));
    let result = check::no_duplicate_charge(&evidence);
    assert!(!result.passed);
    assert!(result.violations[0].what.contains("order-1"), "{result:#?}");
}

#[test]
fn a_provider_key_charged_twice_is_caught() {
    let mut evidence = clean();
    let mut again = charge("pay_1", "order-1");
    again.id = "ch_other".into();
    evidence.ledger.push(again);
    let result = check::no_duplicate_charge(&evidence);
    assert!(
        result
            .violations
            .iter()
            .any(|v| v.what.contains("provider key provider_payment_pay_1"))
    );
    assert!(
        result
            .violations
            .iter()
            .any(|v| v.what.contains("payment pay_1 charged 2 times"))
    );
}

#[test]
fn an_acknowledged_payment_missing_from_every_database_is_caught() {
    let mut evidence = clean();
    evidence.payments.retain(|r| r.id != "pay_2");
    let result = check::no_acknowledged_payment_lost(&evidence);
    assert!(!result.passed);
    assert!(
        result.violations[0]
            .what
            .contains("pay_2 is in no regional database")
    );
}

#[test]
fn an_acknowledged_success_without_a_charge_is_caught() {
    let mut evidence = clean();
    evidence
        .ledger
        .retain(|c| c.idempotency_key != "provider_payment_pay_1");
    let result = check::no_acknowledged_payment_lost(&evidence);
    assert!(result.violations.iter().any(|v| {
        v.what
            .contains("pay_1 succeeded but the provider has no charge")
    }));
}

#[test]
fn a_replay_with_a_changed_body_is_caught() {
    let mut evidence = clean();
    let replay = evidence
        .log
        .attempts
        .iter_mut()
        .find(|a| a.op == 2)
        .unwrap();
    replay.response_body = Some(payment_body("pay_1", "order-1", "2026-11-29T20:06:39.000Z"));
    let result = check::faithful_replay(&evidence);
    assert!(!result.passed);
    assert!(
        result.violations[0].what.contains("different body"),
        "{result:#?}"
    );
}

#[test]
fn a_replay_not_marked_as_replayed_is_caught() {
    let mut evidence = clean();
    evidence
        .log
        .attempts
        .iter_mut()
        .find(|a| a.op == 2)
        .unwrap()
        .replayed = false;
    let result = check::faithful_replay(&evidence);
    assert!(
        result
            .violations
            .iter()
            .any(|v| v.what.contains("Idempotent-Replayed"))
    );
}

#[test]
fn a_stored_response_that_differs_from_the_first_answer_is_caught() {
    let mut evidence = clean();
    evidence.store_records.as_mut().unwrap()[0].response_body = Some("{}".into());
    assert!(!check::faithful_replay(&evidence).passed);
}

#[test]
fn a_stored_duplicate_rejection_that_differs_from_the_one_sent_is_caught() {
    let mut evidence = clean();
    evidence.store_records.as_mut().unwrap()[2].response_status = Some(201);
    let result = check::faithful_replay(&evidence);
    assert!(
        result.violations[0]
            .what
            .contains("stored response for key k5"),
        "{result:#?}"
    );
}

#[test]
fn a_final_replay_of_a_duplicate_rejection_that_executes_instead_is_caught() {
    let mut evidence = clean();
    let again = attempt_of(&mut evidence, 6);
    again.status = Some(201);
    again.error_code = None;
    again.response_body = Some(payment_body("pay_6", "dup-1", "2026-11-29T20:07:00.000Z"));
    let result = check::faithful_replay(&evidence);
    assert!(
        result.violations.iter().any(|v| v.what
            == "replay of key k5 answered 201 instead of the original 409 DUPLICATE_MERCHANT_REFERENCE"),
        "{result:#?}"
    );
    assert!(
        result.violations.iter().any(|v| v
            .what
            .contains("key k5 of tenant acme answered 201 after 409")),
        "{result:#?}"
    );
}

#[test]
fn a_final_replay_of_a_duplicate_rejection_not_marked_as_replayed_is_caught() {
    let mut evidence = clean();
    attempt_of(&mut evidence, 6).replayed = false;
    let result = check::faithful_replay(&evidence);
    assert!(
        result
            .violations
            .iter()
            .any(|v| v.what == "replay of key k5 lacks Idempotent-Replayed: true"),
        "{result:#?}"
    );
}

#[test]
fn a_declined_payment_replayed_with_a_changed_body_is_caught() {
    let mut evidence = clean();
    let declined = r#"{"errorCode":"INSUFFICIENT_FUNDS","message":"declined","paymentId":"pay_1"}"#;
    for op in [1, 2] {
        let answer = attempt_of(&mut evidence, op);
        answer.status = Some(402);
        answer.error_code = Some("INSUFFICIENT_FUNDS".into());
        answer.response_body = Some(declined.into());
    }
    evidence.store_records.as_mut().unwrap()[0].response_status = Some(402);
    evidence.store_records.as_mut().unwrap()[0].response_body = Some(declined.into());
    assert!(check::faithful_replay(&evidence).passed);

    attempt_of(&mut evidence, 2).response_body = Some(declined.replace("declined", "no funds"));
    let result = check::faithful_replay(&evidence);
    assert!(
        result.violations[0].what.contains(
            "key k1 of tenant acme answered 402 INSUFFICIENT_FUNDS with a different body"
        ),
        "{result:#?}"
    );
}

#[test]
fn a_key_whose_202_named_another_payment_than_its_201_is_caught() {
    let mut evidence = clean();
    // The retried 503 becomes a 202 naming a payment the 201 does not.
    let first_try = evidence
        .log
        .attempts
        .iter_mut()
        .find(|a| a.op == 1)
        .unwrap();
    first_try.status = Some(202);
    first_try.error_code = None;
    first_try.response_body =
        Some(r#"{"status":"processing","paymentId":"pay_7","message":"recovering"}"#.into());
    let result = check::no_duplicate_payment(&evidence);
    assert!(
        result.violations.iter().any(|v| v
            .what
            .contains("key k1 of tenant acme was answered with 2 different payments")),
        "{result:#?}"
    );
}

#[test]
fn an_acknowledged_payment_raft_store_does_not_hold_is_caught() {
    let mut evidence = clean();
    evidence
        .store_records
        .as_mut()
        .unwrap()
        .retain(|r| r.key != "k4");
    let result = check::no_acknowledged_payment_lost(&evidence);
    assert_eq!(result.violations.len(), 1, "{result:#?}");
    assert!(
        result.violations[0]
            .what
            .contains("pay_2 has no finished raft-store record under key k4"),
        "{result:#?}"
    );
}

#[test]
fn an_acknowledged_payment_whose_record_is_unfinished_or_names_another_payment_is_caught() {
    let mut unfinished = clean();
    unfinished.store_records.as_mut().unwrap()[1].status = "InProgress".into();
    assert!(!check::no_acknowledged_payment_lost(&unfinished).passed);

    let mut other = clean();
    other.store_records.as_mut().unwrap()[1].payment_id = Some("pay_9".into());
    assert!(!check::no_acknowledged_payment_lost(&other).passed);
}

#[test]
fn without_raft_store_records_the_lost_payment_check_says_it_did_not_compare_them() {
    let mut evidence = clean();
    evidence.store_records = None;
    let result = check::no_acknowledged_payment_lost(&evidence);
    assert!(result.passed, "{result:#?}");
    assert!(
        result
            .notes
            .iter()
            .any(|n| n.contains("raft-store records not available")),
        "{result:#?}"
    );
}

#[test]
fn a_duplicate_merchant_reference_across_regions_is_caught() {
    let mut evidence = clean();
    let mut other = row("us-east", "pay_4", "dup-1");
    other.region = "us-east".into();
    evidence.payments.push(other);
    let dup_b = evidence
        .log
        .attempts
        .iter_mut()
        .find(|a| a.op == 5)
        .unwrap();
    dup_b.status = Some(201);
    dup_b.error_code = None;
    dup_b.response_body = Some(payment_body("pay_4", "dup-1", "2026-11-29T20:06:38.000Z"));

    let payments = check::no_duplicate_payment(&evidence);
    assert!(
        payments.violations[0]
            .what
            .contains("2 payments for merchant reference dup-1")
    );
    let keyless = check::keyless_duplicates_at_most_one_payment(&evidence);
    assert!(
        keyless
            .violations
            .iter()
            .any(|v| v.what.contains("created 2 payments"))
    );
    assert!(
        keyless
            .violations
            .iter()
            .any(|v| v.what.contains("2 payments in the databases"))
    );
}

#[test]
fn a_duplicate_answer_naming_another_payment_is_caught() {
    let mut evidence = clean();
    evidence
        .log
        .attempts
        .iter_mut()
        .find(|a| a.op == 5)
        .unwrap()
        .response_body =
        Some(r#"{"errorCode":"DUPLICATE_MERCHANT_REFERENCE","paymentId":"pay_1"}"#.into());
    assert!(!check::keyless_duplicates_at_most_one_payment(&evidence).passed);
}

#[test]
fn one_key_answered_with_two_payments_is_caught() {
    let mut evidence = clean();
    evidence
        .log
        .attempts
        .iter_mut()
        .find(|a| a.op == 2)
        .unwrap()
        .response_body = Some(payment_body("pay_7", "order-1", "2026-11-29T20:06:36.803Z"));
    let result = check::no_duplicate_payment(&evidence);
    assert!(result.violations.iter().any(|v| {
        v.what
            .contains("key k1 of tenant acme was answered with 2 different payments")
    }));
}

#[test]
fn a_mismatched_body_that_got_201_is_caught() {
    let mut evidence = clean();
    let mismatch = evidence
        .log
        .attempts
        .iter_mut()
        .find(|a| a.op == 3)
        .unwrap();
    mismatch.status = Some(201);
    mismatch.error_code = None;
    mismatch.response_body = Some(payment_body("pay_1", "order-1", "2026-11-29T20:06:36.803Z"));
    let result = check::loud_mismatch(&evidence);
    assert!(!result.passed);
    assert!(
        result.violations[0]
            .what
            .contains("key k1 reused with a different body got 201")
    );
}

#[test]
fn a_mismatched_body_answered_with_another_error_is_caught() {
    let mut evidence = clean();
    let mismatch = evidence
        .log
        .attempts
        .iter_mut()
        .find(|a| a.op == 3)
        .unwrap();
    mismatch.status = Some(422);
    mismatch.error_code = Some("VALIDATION_FAILED".into());
    assert!(!check::loud_mismatch(&evidence).passed);
}

#[test]
fn an_operation_still_unanswered_is_noted_not_condemned() {
    let mut evidence = clean();
    evidence.log.attempts.retain(|a| a.op != 3);
    let result = check::loud_mismatch(&evidence);
    assert!(result.passed);
    assert!(result.notes[0].contains("1 unanswered"));
}

#[test]
fn a_fresh_payment_whose_final_answer_is_not_201_is_caught() {
    for (status, code) in [
        (409, Some("IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST")),
        (409, Some("DUPLICATE_MERCHANT_REFERENCE")),
        (400, Some("VALIDATION_FAILED")),
        (422, Some("VALIDATION_FAILED")),
        (402, Some("INSUFFICIENT_FUNDS")),
    ] {
        let mut evidence = clean();
        // Operation 1's first answer is a 503 (retried); its second, final
        // answer becomes the wrong one.
        let last = evidence
            .log
            .attempts
            .iter_mut()
            .rfind(|a| a.op == 1)
            .unwrap();
        last.status = Some(status);
        last.error_code = code.map(str::to_owned);
        last.response_body = Some(format!(r#"{{"errorCode":"{}"}}"#, code.unwrap()));
        let result = check::payments_answered_201(&evidence);
        assert!(!result.passed, "{status} {code:?}: {result:#?}");
        assert!(
            result.violations[0]
                .what
                .contains(&format!("key k1 of tenant acme ended with {status}")),
            "{result:#?}"
        );
    }
}

#[test]
fn a_fresh_payment_still_retrying_when_the_drill_ended_is_noted_not_condemned() {
    let mut evidence = clean();
    // Only the 503 is left: no final answer.
    evidence
        .log
        .attempts
        .retain(|a| a.op != 1 || a.status == Some(503));
    let result = check::payments_answered_201(&evidence);
    assert!(result.passed, "{result:#?}");
    assert!(result.notes[0].contains("1 unanswered"), "{result:#?}");
}

#[test]
fn an_unreadable_database_fails_the_drill_even_when_nothing_else_is_wrong() {
    let mut evidence = clean();
    evidence
        .gaps
        .push("region us-east's database: unable to open database file".into());
    let results = check::check_all(&evidence);
    assert_eq!(failed(&results), ["evidence complete"], "{results:#?}");
    let complete = &results[0];
    assert!(
        complete.violations[0]
            .what
            .contains("region us-east's database"),
        "{complete:#?}"
    );
}

#[test]
fn a_replay_answered_before_its_payment_was_sent_is_caught_as_not_linearizable() {
    let mut evidence = clean();
    // The replay of k1 (op 2) answered before op 1 was first sent: no
    // execution could have come before it.
    let replay = attempt_of(&mut evidence, 2);
    replay.sent_at = 50;
    replay.answered_at = 60;
    let results = check::check_all(&evidence);
    assert_eq!(failed(&results), ["linearizable"], "{results:#?}");
    let linearizable = results.last().unwrap();
    assert!(
        linearizable.violations[0].what.starts_with(
            "key k1 of tenant acme: a replay answered before any execution of the key could have happened"
        ),
        "{linearizable:#?}"
    );
}
