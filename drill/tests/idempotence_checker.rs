//! The idempotence workload's checker against scripted histories: resends
//! of one payment — one sent while the payment was still unanswered, one
//! through another region after its answer, one with another body — pass
//! every check; each planted violation (another body replayed as success,
//! a replay with other bytes, a resend that created a second payment) fails
//! the `idempotent resends` check and with it the run.

use once_drill::check::{self, CheckResult};
use once_drill::client_log::{Attempt, ClientLog, Intent, KEY_REUSED, Operation, body_hash};
use once_drill::evidence::{Charge, Evidence, PaymentRow};
use once_drill::idempotence;

const ACCOUNT: &str = "acc_drill_acme";

fn payment_body(id: &str) -> String {
    format!(
        r#"{{"object":"payment","id":"{id}","status":"succeeded","accountId":"{ACCOUNT}","amount":{{"value":"10.00","currency":"EUR","minorUnits":1000}},"merchantReference":"order-1","channel":"web","region":"eu-west","createdAt":"2026-12-07T16:00:00.000Z"}}"#
    )
}

fn operation(id: u64, intent: Intent, amount: &str) -> Operation {
    let body = format!(
        r#"{{"accountId":"{ACCOUNT}","amount":"{amount}","currency":"EUR","merchantReference":"order-1"}}"#
    );
    Operation {
        id,
        intent,
        tenant: "acme".into(),
        key: "k1".into(),
        account_id: ACCOUNT.into(),
        merchant_reference: "order-1".into(),
        body_sha256: body_hash(body.as_bytes()),
        body,
    }
}

fn attempt(op: &Operation, sent: u64, answered: u64, status: Option<u16>, region: &str) -> Attempt {
    Attempt {
        op: op.id,
        tenant: op.tenant.clone(),
        key: op.key.clone(),
        body_sha256: op.body_sha256.clone(),
        sent_at: sent,
        answered_at: answered,
        status,
        error_code: None,
        transport_error: status.is_none().then(|| "operation timed out".to_owned()),
        response_body: status.map(|_| payment_body("pay_1")),
        region: Some(region.into()),
        replayed: false,
    }
}

fn row(database: &str, id: &str) -> PaymentRow {
    PaymentRow {
        database: database.into(),
        id: id.into(),
        tenant_id: "acme".into(),
        account_id: ACCOUNT.into(),
        merchant_reference: "order-1".into(),
        amount_minor: 1000,
        currency: "EUR".into(),
        status: "succeeded".into(),
        provider_key: format!("provider_payment_{id}"),
        region: "eu-west".into(),
    }
}

/// Payment 1's first attempt times out (under a fault); a same-body resend
/// sent then through us-east executes it (eu-west's node answered after the
/// router fell back); payment 1's retry gets that answer replayed; a second
/// same-body resend through us-east gets it replayed; an other-body resend
/// is refused loudly.
fn clean() -> Evidence {
    let payment = operation(1, Intent::Payment, "10.00");
    let resend_in_flight = Operation {
        id: 2,
        intent: Intent::Resend {
            of: 1,
            same_body: true,
        },
        ..payment.clone()
    };
    let resend_after = Operation {
        id: 3,
        intent: Intent::Resend {
            of: 1,
            same_body: true,
        },
        ..payment.clone()
    };
    let other_body = operation(
        4,
        Intent::Resend {
            of: 1,
            same_body: false,
        },
        "10.01",
    );
    let mut replayed = attempt(&payment, 400, 420, Some(201), "eu-west");
    replayed.replayed = true;
    let mut replayed_elsewhere = attempt(&resend_after, 600, 610, Some(201), "us-east");
    replayed_elsewhere.replayed = true;
    let mut refused = attempt(&other_body, 700, 705, Some(409), "us-east");
    refused.error_code = Some(KEY_REUSED.into());
    refused.response_body = Some(format!(r#"{{"errorCode":"{KEY_REUSED}"}}"#));
    let attempts = vec![
        attempt(&payment, 100, 10_100, None, "eu-west"),
        attempt(&resend_in_flight, 150, 300, Some(201), "eu-west"),
        replayed,
        replayed_elsewhere,
        refused,
    ];
    Evidence {
        log: ClientLog {
            operations: vec![payment, resend_in_flight, resend_after, other_body],
            attempts,
        },
        payments: vec![row("eu-west", "pay_1"), row("us-east", "pay_1")],
        ledger: vec![Charge {
            id: "ch_pay_1".into(),
            idempotency_key: "provider_payment_pay_1".into(),
            status: "succeeded".into(),
            decline_code: None,
            account_id: ACCOUNT.into(),
            amount_minor: 1000,
            currency: "EUR".into(),
            merchant_reference: "order-1".into(),
            requests: 1,
        }],
        store_records: None,
        store_member: None,
        gaps: Vec::new(),
    }
}

fn last_attempt_of(evidence: &mut Evidence, op: u64) -> &mut Attempt {
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

fn resend_violations(evidence: &Evidence) -> Vec<String> {
    idempotence::check(evidence)
        .0
        .violations
        .into_iter()
        .map(|v| v.what)
        .collect()
}

#[test]
fn resends_answered_as_the_contract_says_pass_and_are_counted_by_kind() {
    let evidence = clean();
    let results = check::check_all(&evidence);
    assert_eq!(failed(&results), Vec::<&str>::new(), "{results:#?}");
    let (result, counts) = idempotence::check(&evidence);
    assert!(result.passed);
    assert_eq!(counts.same_body, 2);
    assert_eq!(counts.same_body_answered, 2);
    assert_eq!(counts.same_body_before_answer, 1, "{counts:?}");
    assert_eq!(counts.other_body, 1);
    assert_eq!(counts.other_body_answered, 1);
    // The original's final answer came from eu-west; two resends were
    // answered by us-east.
    assert_eq!(counts.answered_by_another_region, 2, "{counts:?}");
    assert_eq!(counts.violations, 0);
}

#[test]
fn another_body_replayed_as_success_is_caught() {
    let mut evidence = clean();
    let other = last_attempt_of(&mut evidence, 4);
    other.status = Some(201);
    other.error_code = None;
    other.replayed = true;
    other.response_body = Some(payment_body("pay_1"));
    let violations = resend_violations(&evidence);
    assert!(
        violations
            .iter()
            .any(|v| v.contains("other-body resend of key k1 got 201")),
        "{violations:?}"
    );
    assert!(failed(&check::check_all(&evidence)).contains(&"idempotent resends"));
}

#[test]
fn another_body_answered_with_some_other_error_is_caught() {
    let mut evidence = clean();
    let other = last_attempt_of(&mut evidence, 4);
    other.status = Some(400);
    other.error_code = Some("VALIDATION_FAILED".into());
    let violations = resend_violations(&evidence);
    assert!(
        violations
            .iter()
            .any(|v| v.contains("instead of 409 IDEMPOTENCY_KEY_REUSED")),
        "{violations:?}"
    );
}

#[test]
fn a_replay_with_other_bytes_is_caught() {
    let mut evidence = clean();
    let resend = last_attempt_of(&mut evidence, 3);
    resend.response_body = Some(payment_body("pay_1").replace("16:00:00.000Z", "16:00:00.001Z"));
    let violations = resend_violations(&evidence);
    assert!(
        violations
            .iter()
            .any(|v| v.contains("same-body resend of key k1 answered 201 with other bytes")),
        "{violations:?}"
    );
    assert!(failed(&check::check_all(&evidence)).contains(&"idempotent resends"));
}

#[test]
fn a_replay_not_marked_replayed_after_the_answer_was_given_is_caught() {
    let mut evidence = clean();
    last_attempt_of(&mut evidence, 3).replayed = false;
    let violations = resend_violations(&evidence);
    assert!(
        violations
            .iter()
            .any(|v| v.contains("without Idempotent-Replayed")),
        "{violations:?}"
    );
}

#[test]
fn a_resend_that_created_a_second_payment_is_caught() {
    let mut evidence = clean();
    // The resend sent while the payment was unanswered executed it a second
    // time: another payment id in its answer and in us-east's database.
    last_attempt_of(&mut evidence, 2).response_body = Some(payment_body("pay_2"));
    evidence.payments.push(row("us-east", "pay_2"));
    let violations = resend_violations(&evidence);
    assert!(
        violations.iter().any(|v| v.contains("a second payment")),
        "{violations:?}"
    );
    assert!(
        violations
            .iter()
            .any(|v| v.contains("has 2 payments: a resend created a second payment")),
        "{violations:?}"
    );
    assert!(failed(&check::check_all(&evidence)).contains(&"idempotent resends"));
}

#[test]
fn a_same_body_resend_refused_as_a_mismatch_is_caught() {
    let mut evidence = clean();
    let resend = last_attempt_of(&mut evidence, 3);
    resend.status = Some(409);
    resend.error_code = Some(KEY_REUSED.into());
    let violations = resend_violations(&evidence);
    assert!(
        violations
            .iter()
            .any(|v| v.contains("not the key's stored answer")),
        "{violations:?}"
    );
}
