//! Property tests of the whole checker. Histories are made from the model by
//! construction: each attempt gets a random moment of effect inside a random
//! interval (so intervals overlap freely), the contract decides in the order
//! of those moments what each answer is, and some answers are then lost
//! (the attempt made indeterminate, whether or not it took effect). Such a
//! history always holds; with one replay's bytes changed, or one replay
//! moved wholly before every attempt that could have executed its body, it
//! never does; and what the minimizer keeps is a failing history from which
//! no single attempt can be dropped.

use proptest::prelude::*;
use proptest::sample::Index;

use super::minimize::{linearizable_after_something, minimize};
use super::model::IdempotencyContract;
use super::search::{Verdict, search};
use super::{STATE_BUDGET, check, history};
use crate::client_log::{Attempt, ClientLog, DUPLICATE_REFERENCE, KEY_REUSED};

/// Which body an attempt sends.
#[derive(Debug, Clone, Copy)]
enum Body {
    First,
    Other,
    /// The body the key executed, or the first body if none has yet.
    Executed,
}

/// What becomes of an attempt.
#[derive(Debug, Clone, Copy)]
enum Fate {
    /// Takes effect at its moment; the client sees the answer.
    Answered,
    /// Takes effect at its moment; the answer is lost in one of five ways.
    LostAfterEffect(u8),
    /// Never reaches the contract; the answer is one of five indeterminate
    /// ones.
    LostBeforeEffect(u8),
    /// A `400`: no effect.
    Invalid,
}

#[derive(Debug, Clone)]
struct Planned {
    body: Body,
    fate: Fate,
    /// When it takes effect, if it does.
    moment: u64,
    /// How long before its moment it was sent, and after it answered.
    lead: u64,
    lag: u64,
}

#[derive(Debug, Clone)]
struct KeyPlan {
    attempts: Vec<Planned>,
    /// `201`, `402` or `409 DUPLICATE_MERCHANT_REFERENCE`.
    answer_kind: u8,
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        6 => Just(Fate::Answered),
        2 => (0..5u8).prop_map(Fate::LostAfterEffect),
        2 => (0..5u8).prop_map(Fate::LostBeforeEffect),
        1 => Just(Fate::Invalid),
    ]
}

fn planned(moments: std::ops::Range<u64>) -> impl Strategy<Value = Planned> {
    (
        prop::bool::weighted(0.2),
        fate(),
        moments,
        0..300u64,
        0..300u64,
    )
        .prop_map(|(other, fate, moment, lead, lag)| Planned {
            body: if other { Body::Other } else { Body::First },
            fate,
            moment,
            lead,
            lag,
        })
}

/// Up to ten random attempts, then two answered ones of the executed body:
/// so every key has a replay, and its answer is seen at least twice.
fn key_plan() -> impl Strategy<Value = KeyPlan> {
    (
        prop::collection::vec(planned(0..1_000), 0..10),
        prop::collection::vec(planned(1_000..1_300), 2),
        0..3u8,
    )
        .prop_map(|(mut attempts, tail, answer_kind)| {
            attempts.extend(tail.into_iter().map(|p| Planned {
                body: Body::Executed,
                fate: Fate::Answered,
                ..p
            }));
            KeyPlan {
                attempts,
                answer_kind,
            }
        })
}

fn lost(how: u8) -> (Option<u16>, Option<&'static str>) {
    match how {
        0 => (None, None),
        1 => (Some(503), Some("SERVICE_UNAVAILABLE")),
        2 => (Some(421), Some("MISDIRECTED_REQUEST")),
        3 => (Some(202), None),
        _ => (Some(409), Some("IDEMPOTENCY_REQUEST_IN_PROGRESS")),
    }
}

/// The attempts of one key, answered as the contract would in the order of
/// their moments.
fn attempts_of(key: &str, plan: &KeyPlan, next_op: &mut u64) -> Vec<Attempt> {
    let mut planned = plan.attempts.clone();
    planned.sort_by_key(|p| p.moment);
    let stored = match plan.answer_kind {
        0 => (
            201,
            None,
            format!(r#"{{"id":"pay_{key}","status":"succeeded"}}"#),
        ),
        1 => (
            402,
            None,
            format!(r#"{{"errorCode":"PAYMENT_DECLINED","paymentId":"pay_{key}"}}"#),
        ),
        _ => (
            409,
            Some(DUPLICATE_REFERENCE),
            format!(r#"{{"errorCode":"{DUPLICATE_REFERENCE}","paymentId":"pay_other"}}"#),
        ),
    };
    let mut executed: Option<&str> = None;
    let mut attempts = Vec::new();
    for p in planned {
        let body = match p.body {
            Body::First => "b0",
            Body::Other => "b1",
            Body::Executed => executed.unwrap_or("b0"),
        };
        let mut answer = |status: Option<u16>, code: Option<&str>, response: Option<String>| {
            *next_op += 1;
            Attempt {
                op: *next_op,
                tenant: "acme".into(),
                key: key.into(),
                body_sha256: body.into(),
                sent_at: 1_000 + p.moment - p.lead,
                answered_at: 1_000 + p.moment + p.lag,
                status,
                error_code: code.map(str::to_owned),
                transport_error: status.is_none().then(|| "timed out".to_owned()),
                response_body: response,
                region: None,
                replayed: false,
            }
        };
        let attempt = match p.fate {
            Fate::Invalid => answer(
                Some(400),
                Some("VALIDATION_ERROR"),
                Some(r#"{"errorCode":"VALIDATION_ERROR"}"#.into()),
            ),
            Fate::LostBeforeEffect(how) => {
                let (status, code) = lost(how);
                answer(status, code, None)
            }
            Fate::Answered | Fate::LostAfterEffect(_) => {
                let mut seen = match executed {
                    None => {
                        executed = Some(body);
                        answer(Some(stored.0), stored.1, Some(stored.2.clone()))
                    }
                    Some(b) if b == body => {
                        let mut a = answer(Some(stored.0), stored.1, Some(stored.2.clone()));
                        a.replayed = true;
                        a
                    }
                    Some(_) => answer(
                        Some(409),
                        Some(KEY_REUSED),
                        Some(format!(r#"{{"errorCode":"{KEY_REUSED}"}}"#)),
                    ),
                };
                if let Fate::LostAfterEffect(how) = p.fate {
                    let (status, code) = lost(how);
                    seen.status = status;
                    seen.error_code = code.map(str::to_owned);
                    seen.response_body = None;
                    seen.replayed = false;
                }
                seen
            }
        };
        attempts.push(attempt);
    }
    attempts
}

/// The log of several keys, `k0` first.
fn log_of(plans: &[KeyPlan]) -> ClientLog {
    let mut next_op = 0;
    let mut attempts: Vec<Attempt> = plans
        .iter()
        .enumerate()
        .flat_map(|(i, plan)| attempts_of(&format!("k{i}"), plan, &mut next_op))
        .collect();
    attempts.sort_by_key(|a| (a.sent_at, a.op));
    ClientLog {
        operations: Vec::new(),
        attempts,
    }
}

fn replays_of_k0(log: &ClientLog) -> Vec<usize> {
    (0..log.attempts.len())
        .filter(|&i| {
            let a = &log.attempts[i];
            a.key == "k0" && a.replayed && a.is_final()
        })
        .collect()
}

/// `k0`, and only it, is broken; what the minimizer keeps of it fails, and
/// with any single attempt dropped is linearizable from some state the key
/// may have been in before it (what the dropped attempt did may have
/// happened there).
fn assert_only_k0_broken_and_minimal(log: &ClientLog) -> Result<(), TestCaseError> {
    let found = check(log);
    let broken: Vec<_> = found.violations.iter().map(|v| v.key.as_str()).collect();
    prop_assert_eq!(broken, ["k0"], "{:#?}", found);

    let k0 = history::histories(log)
        .into_iter()
        .find(|h| h.key == "k0")
        .unwrap();
    let Verdict::NotLinearizable(blocked) = search(&IdempotencyContract, &k0.calls, STATE_BUDGET)
    else {
        return Err(TestCaseError::fail("k0 not found broken"));
    };
    let kept = minimize(&k0.calls, blocked.refusal, STATE_BUDGET);
    let part: Vec<_> = kept.iter().map(|&i| k0.calls[i].clone()).collect();
    prop_assert!(
        matches!(
            search(&IdempotencyContract, &part, STATE_BUDGET),
            Verdict::NotLinearizable(_)
        ),
        "kept {:?} of {:#?}",
        kept,
        k0.entries
    );
    for drop in 0..part.len() {
        let mut smaller = part.clone();
        smaller.remove(drop);
        prop_assert!(
            linearizable_after_something(&smaller, STATE_BUDGET),
            "dropping {} of {:?} still fails: {:#?}",
            drop,
            kept,
            k0.entries
        );
    }
    let entries: Vec<_> = kept.iter().map(|&i| k0.entries[i].clone()).collect();
    prop_assert_eq!(&found.violations[0].history, &entries);
    Ok(())
}

proptest! {
    #[test]
    fn histories_made_by_the_contract_hold(plans in prop::collection::vec(key_plan(), 1..4)) {
        let log = log_of(&plans);
        let found = check(&log);
        prop_assert!(found.holds(), "{:#?}\n{:#?}", found.violations, log.attempts);
        prop_assert!(found.undecided.is_empty());
        prop_assert_eq!(found.attempts, log.attempts.len());
    }

    #[test]
    fn one_replay_with_other_bytes_breaks_its_key(
        plans in prop::collection::vec(key_plan(), 1..4),
        pick in any::<Index>(),
    ) {
        let mut log = log_of(&plans);
        let replays = replays_of_k0(&log);
        let replay = &mut log.attempts[*pick.get(&replays)];
        replay.response_body.as_mut().unwrap().push(' ');
        assert_only_k0_broken_and_minimal(&log)?;
    }

    #[test]
    fn one_replay_moved_before_its_execution_breaks_its_key(
        plans in prop::collection::vec(key_plan(), 1..4),
        pick in any::<Index>(),
    ) {
        let mut log = log_of(&plans);
        let replays = replays_of_k0(&log);
        let moved = *pick.get(&replays);
        let body = log.attempts[moved].body_sha256.clone();
        // Every attempt that could have executed the replay's body: the one
        // whose answer says so, and any that got no determinate answer.
        let first_execution_sent = log
            .attempts
            .iter()
            .filter(|a| a.key == "k0" && a.body_sha256 == body)
            .filter(|a| !a.is_final() || (a.is_stored_answer() && !a.replayed))
            .map(|a| a.sent_at)
            .min()
            .unwrap();
        let replay = &mut log.attempts[moved];
        replay.sent_at = first_execution_sent - 20;
        replay.answered_at = first_execution_sent - 10;
        assert_only_k0_broken_and_minimal(&log)?;
    }
}
