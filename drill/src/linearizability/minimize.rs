//! The smallest failing sub-history of a key's history that is not
//! linearizable: attempts are dropped one at a time, each for good if what
//! is left still shows the violation, until no single attempt can be
//! dropped (1-minimal, in delta-debugging's terms). What is left is the few
//! attempts that show it, instead of a hot key's hundreds.
//!
//! "Still shows the violation" needs care. Judged from an absent key, any
//! lone replay fails (nothing executed before it), so plain "still not
//! linearizable" would shrink every violation to one replay, blaming it for
//! an execution the shrinking dropped. So a part of a history shows the
//! violation when it fails *whatever the attempts left out did before it*
//! (from every state in [`states_before`]) and reads as the same reason from
//! one of them: two answers that differ, a replay before the execution that
//! follows it. A violation only an absent key explains (a replay or a
//! mismatch with no execution anywhere that could precede it) is shrunk
//! from the absent key, keeping its reason.

use std::cmp::Reverse;

use super::model::{Effect, IdempotencyContract, Op, Refusal, states_before};
use super::search::{Call, Verdict, search, search_from};

/// How a part of the history is judged while shrinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judged {
    /// It fails from every state the key may have been in before it.
    WhateverCameBefore,
    /// It fails on an absent key.
    OnAnAbsentKey,
}

/// The indices (into `calls`, in order) of a 1-minimal part of `calls` that
/// still shows `reason`, the deepest refusal [`search`] found in `calls`
/// from an absent key. A part the search cannot decide within `budget`
/// counts as not showing it: its attempt stays.
pub fn minimize(calls: &[Call<Op>], reason: Refusal, budget: usize) -> Vec<usize> {
    let shows = |kept: &[usize], judged: Judged| {
        let part: Vec<_> = kept.iter().map(|&i| calls[i].clone()).collect();
        shows(&part, reason, judged, budget)
    };
    let mut kept: Vec<usize> = (0..calls.len()).collect();
    let judged = if shows(&kept, Judged::WhateverCameBefore) {
        Judged::WhateverCameBefore
    } else {
        Judged::OnAnAbsentKey
    };
    // What says least is tried first: attempts without a determinate
    // effect, then replays and mismatches, executions last; later ones
    // before earlier. What is left then leans on the execution and the
    // first answers rather than on a replay of them.
    let mut order: Vec<usize> = (0..calls.len()).collect();
    order.sort_by_key(|&i| (telling(calls[i].op.effect), Reverse(i)));
    // An attempt that could not be dropped may become droppable once others
    // are gone (dropping attempts can make a history fail or pass), so
    // passes repeat until one drops nothing.
    loop {
        let mut dropped = false;
        for &i in &order {
            let Some(at) = kept.iter().position(|&k| k == i) else {
                continue;
            };
            let mut trial = kept.clone();
            trial.remove(at);
            if shows(&trial, judged) {
                kept = trial;
                dropped = true;
            }
        }
        if !dropped {
            return kept;
        }
    }
}

/// How much an attempt says about the key: the order of dropping.
fn telling(effect: Effect) -> u8 {
    match effect {
        Effect::Indeterminate | Effect::Inert => 0,
        Effect::Replayed(_) | Effect::Mismatch => 1,
        Effect::Executed(_) => 2,
    }
}

fn shows(part: &[Call<Op>], reason: Refusal, judged: Judged, budget: usize) -> bool {
    let contract = IdempotencyContract;
    match judged {
        Judged::OnAnAbsentKey => matches!(
            search(&contract, part, budget),
            Verdict::NotLinearizable(blocked) if blocked.refusal == reason
        ),
        Judged::WhateverCameBefore => {
            let mut reads_as_reason = false;
            for start in states_before(part.iter().map(|c| &c.op)) {
                match search_from(&contract, start, part, budget) {
                    Verdict::NotLinearizable(blocked) => {
                        reads_as_reason |= blocked.refusal == reason;
                    }
                    Verdict::Linearizable | Verdict::Undecided => return false,
                }
            }
            reads_as_reason
        }
    }
}

/// Whether `part` is linearizable from some state the key may have been in
/// before it: what the tests of minimality ask of a part with one attempt
/// fewer.
#[cfg(test)]
pub fn linearizable_after_something(part: &[Call<Op>], budget: usize) -> bool {
    states_before(part.iter().map(|c| &c.op))
        .into_iter()
        .any(|start| {
            search_from(&IdempotencyContract, start, part, budget) == Verdict::Linearizable
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linearizability::model::{AnswerId, BodyId};

    fn call(invoked: u64, responded: Option<u64>, effect: Effect) -> Call<Op> {
        Call {
            invoked,
            responded,
            op: Op {
                body: BodyId(0),
                effect,
            },
        }
    }

    fn reason(calls: &[Call<Op>]) -> Refusal {
        match search(&IdempotencyContract, calls, 10_000) {
            Verdict::NotLinearizable(blocked) => blocked.refusal,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_hot_keys_one_wrong_replay_shrinks_to_the_execution_and_that_replay() {
        let mut calls = vec![call(0, Some(10), Effect::Executed(AnswerId(0)))];
        for i in 0..30 {
            calls.push(call(20 + i, Some(100 + i), Effect::Replayed(AnswerId(0))));
            calls.push(call(20 + i, None, Effect::Indeterminate));
        }
        calls.push(call(50, Some(60), Effect::Replayed(AnswerId(1))));
        let why = reason(&calls);
        assert_eq!(why, Refusal::DifferentAnswers);
        assert_eq!(minimize(&calls, why, 10_000), [0, calls.len() - 1]);
    }

    #[test]
    fn a_replay_before_its_execution_keeps_both() {
        let calls = [
            call(0, Some(10), Effect::Replayed(AnswerId(0))),
            // Sent after the replay was answered: too late to be its execution.
            call(15, None, Effect::Indeterminate),
            call(20, Some(30), Effect::Executed(AnswerId(0))),
            call(40, Some(50), Effect::Replayed(AnswerId(0))),
        ];
        let why = reason(&calls);
        assert_eq!(why, Refusal::ReplayBeforeExecution);
        assert_eq!(minimize(&calls, why, 10_000), [0, 2]);
    }

    #[test]
    fn a_mismatch_with_no_other_body_executed_shrinks_to_itself_on_an_absent_key() {
        // Whether the timed-out attempt of the same body executed or not,
        // the mismatch is wrong; with another body executed first it would
        // be right, so only an absent key shows it.
        let calls = [
            call(0, None, Effect::Indeterminate),
            call(10, Some(20), Effect::Mismatch),
        ];
        let why = reason(&calls);
        assert_eq!(why, Refusal::MismatchWithoutAnotherBody);
        assert_eq!(minimize(&calls, why, 10_000), [1]);
    }
}
