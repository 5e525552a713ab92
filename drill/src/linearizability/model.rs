//! The idempotency contract for one scoped key, as a sequential
//! specification: the key is absent until one request executes under it,
//! and from then on every request with the same body is answered with that
//! execution's answer, byte for byte, and every request with another body is
//! refused as a mismatch (DESIGN I1–I3). What each attempt did, as its answer
//! tells it, is an [`Effect`]; which states an effect may meet is
//! [`IdempotencyContract`]'s [`Specification`].

use std::fmt;

use super::search::Specification;

/// A request body (by its SHA-256), numbered per key: equal numbers, equal
/// bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BodyId(pub u32);

/// An answer (status and response bytes), numbered per key: equal numbers,
/// equal answers byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AnswerId(pub u32);

/// What the service holds for the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    Absent,
    /// A request with `body` executed; `answer` is what it answered, or
    /// `None` while nobody has observed it (an execution whose answer was
    /// lost): the first replay observed binds it.
    Executed {
        body: BodyId,
        answer: Option<AnswerId>,
    },
}

/// What one attempt says happened, from its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Effect {
    /// A stored answer (`201`, `402`, `409 DUPLICATE_MERCHANT_REFERENCE`)
    /// not marked replayed: this attempt executed.
    Executed(AnswerId),
    /// A stored answer marked `Idempotent-Replayed: true`.
    Replayed(AnswerId),
    /// `409 IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST`.
    Mismatch,
    /// No determinate answer (none, 5xx, `421`, `202`, `409
    /// IDEMPOTENCY_REQUEST_IN_PROGRESS`): it may have executed, or not.
    Indeterminate,
    /// Any other final answer (a validation error, say): the contract gives
    /// it no effect; the other checks judge whether it was right.
    Inert,
}

/// One attempt as the specification sees it: the body it sent and what its
/// answer says it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Op {
    pub body: BodyId,
    pub effect: Effect,
}

/// Why an attempt's answer cannot be what the key answered at that point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    ReplayBeforeExecution,
    ReplayOfAnotherBody,
    DifferentAnswers,
    TwoExecutions,
    /// On an absent key, or one that executed this very body.
    MismatchWithoutAnotherBody,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::ReplayBeforeExecution => {
                "a replay answered before any execution of the key could have happened"
            }
            Refusal::ReplayOfAnotherBody => {
                "a replay answered for a request body other than the one the key executed"
            }
            Refusal::DifferentAnswers => "two different answers",
            Refusal::TwoExecutions => "two executions",
            Refusal::MismatchWithoutAnotherBody => {
                "a mismatch answered when no other request body could have executed under the key"
            }
        })
    }
}

/// Every state a key may have been in before a part of its history, when
/// attempts outside that part may have come first: absent, or executed
/// with one of the bodies the part sends or with a body it never sends. The
/// answer is left unobserved: that admits every run an observed answer does
/// (the first replay binds it to the same answer), so no answer needs trying.
pub fn states_before<'a>(ops: impl IntoIterator<Item = &'a Op>) -> Vec<State> {
    let mut bodies: Vec<BodyId> = ops.into_iter().map(|op| op.body).collect();
    bodies.sort_by_key(|b| b.0);
    bodies.dedup();
    let unsent = BodyId(bodies.last().map_or(0, |b| b.0.saturating_add(1)));
    std::iter::once(State::Absent)
        .chain(
            bodies
                .into_iter()
                .chain([unsent])
                .map(|body| State::Executed { body, answer: None }),
        )
        .collect()
}

/// The contract's sequential specification.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdempotencyContract;

impl Specification for IdempotencyContract {
    type State = State;
    type Op = Op;
    type Refusal = Refusal;

    fn initial(&self) -> State {
        State::Absent
    }

    fn step(&self, state: &State, op: &Op) -> Result<Vec<State>, Refusal> {
        let state = *state;
        match (op.effect, state) {
            (Effect::Executed(answer), State::Absent) => Ok(vec![State::Executed {
                body: op.body,
                answer: Some(answer),
            }]),
            (Effect::Executed(_), State::Executed { .. }) => Err(Refusal::TwoExecutions),

            (Effect::Replayed(_), State::Absent) => Err(Refusal::ReplayBeforeExecution),
            (Effect::Replayed(answer), State::Executed { body, answer: held }) => {
                if body != op.body {
                    Err(Refusal::ReplayOfAnotherBody)
                } else if held.is_some_and(|held| held != answer) {
                    Err(Refusal::DifferentAnswers)
                } else {
                    Ok(vec![State::Executed {
                        body,
                        answer: Some(answer),
                    }])
                }
            }

            (Effect::Mismatch, State::Executed { body, .. }) if body != op.body => Ok(vec![state]),
            (Effect::Mismatch, _) => Err(Refusal::MismatchWithoutAnotherBody),

            (Effect::Indeterminate, State::Absent) => Ok(vec![
                State::Executed {
                    body: op.body,
                    answer: None,
                },
                state,
            ]),
            (Effect::Indeterminate | Effect::Inert, _) => Ok(vec![state]),
        }
    }

    /// Once a key has executed its body never changes, and once its answer
    /// is bound neither does that; so whatever is legal there without a
    /// change stays so.
    fn is_stable(&self, state: &State, op: &Op) -> bool {
        match (op.effect, *state) {
            (Effect::Inert, _) => true,
            (Effect::Indeterminate | Effect::Mismatch, State::Executed { body, .. }) => {
                op.effect == Effect::Indeterminate || body != op.body
            }
            (
                Effect::Replayed(answer),
                State::Executed {
                    body,
                    answer: Some(held),
                },
            ) => body == op.body && held == answer,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: BodyId = BodyId(0);
    const OTHER: BodyId = BodyId(1);
    const A: AnswerId = AnswerId(0);
    const Z: AnswerId = AnswerId(1);

    fn op(body: BodyId, effect: Effect) -> Op {
        Op { body, effect }
    }

    fn executed(answer: Option<AnswerId>) -> State {
        State::Executed { body: B, answer }
    }

    #[test]
    fn an_execution_is_legal_only_on_an_absent_key() {
        let c = IdempotencyContract;
        let run = op(B, Effect::Executed(A));
        assert_eq!(c.step(&State::Absent, &run), Ok(vec![executed(Some(A))]));
        assert_eq!(c.step(&executed(None), &run), Err(Refusal::TwoExecutions));
    }

    #[test]
    fn a_replay_binds_an_unobserved_answer_and_must_equal_an_observed_one() {
        let c = IdempotencyContract;
        assert_eq!(
            c.step(&executed(None), &op(B, Effect::Replayed(Z))),
            Ok(vec![executed(Some(Z))])
        );
        assert_eq!(
            c.step(&executed(Some(A)), &op(B, Effect::Replayed(Z))),
            Err(Refusal::DifferentAnswers)
        );
        assert_eq!(
            c.step(&State::Absent, &op(B, Effect::Replayed(A))),
            Err(Refusal::ReplayBeforeExecution)
        );
        assert_eq!(
            c.step(&executed(Some(A)), &op(OTHER, Effect::Replayed(A))),
            Err(Refusal::ReplayOfAnotherBody)
        );
    }

    #[test]
    fn a_mismatch_needs_another_body_executed() {
        let c = IdempotencyContract;
        assert_eq!(
            c.step(&executed(None), &op(OTHER, Effect::Mismatch)),
            Ok(vec![executed(None)])
        );
        assert_eq!(
            c.step(&executed(None), &op(B, Effect::Mismatch)),
            Err(Refusal::MismatchWithoutAnotherBody)
        );
        assert_eq!(
            c.step(&State::Absent, &op(OTHER, Effect::Mismatch)),
            Err(Refusal::MismatchWithoutAnotherBody)
        );
    }

    #[test]
    fn an_indeterminate_attempt_may_execute_or_not() {
        let c = IdempotencyContract;
        let maybe = op(B, Effect::Indeterminate);
        assert_eq!(
            c.step(&State::Absent, &maybe),
            Ok(vec![executed(None), State::Absent])
        );
        assert_eq!(
            c.step(&executed(Some(A)), &maybe),
            Ok(vec![executed(Some(A))])
        );
        assert!(!c.is_stable(&State::Absent, &maybe));
        assert!(c.is_stable(&executed(None), &maybe));
    }

    #[test]
    fn the_states_before_a_part_of_a_history_are_absent_or_executed_unobserved() {
        let ops = [
            op(OTHER, Effect::Mismatch),
            op(B, Effect::Replayed(A)),
            op(B, Effect::Indeterminate),
        ];
        assert_eq!(
            states_before(&ops),
            [
                State::Absent,
                executed(None),
                State::Executed {
                    body: OTHER,
                    answer: None
                },
                State::Executed {
                    body: BodyId(2),
                    answer: None
                },
            ]
        );
    }

    #[test]
    fn stable_means_legal_unchanged_and_staying_so() {
        let c = IdempotencyContract;
        assert!(c.is_stable(&executed(Some(A)), &op(B, Effect::Replayed(A))));
        // It would bind the answer: a change.
        assert!(!c.is_stable(&executed(None), &op(B, Effect::Replayed(A))));
        assert!(!c.is_stable(&executed(Some(A)), &op(B, Effect::Replayed(Z))));
        assert!(c.is_stable(&executed(None), &op(OTHER, Effect::Mismatch)));
        assert!(!c.is_stable(&State::Absent, &op(OTHER, Effect::Mismatch)));
        assert!(c.is_stable(&State::Absent, &op(B, Effect::Inert)));
    }
}
