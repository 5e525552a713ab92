//! The search for a linearization of one object's history: Wing & Gong's
//! depth-first search over which call takes effect next, with Lowe's memo
//! of every `(calls already linearized, model state)` pair explored (the
//! scheme porcupine uses), so no configuration is searched twice, and a
//! budget of explored configurations after which the answer is "undecided"
//! rather than a wait without end.
//!
//! It knows nothing of payments: the sequential specification comes in as a
//! [`Specification`], the history as [`Call`]s. Two reductions, each argued
//! where it is made, keep a hot key's many concurrent calls from multiplying
//! configurations: a call that is *stable* in the current state (legal, no
//! change, and so in every state that can follow) is linearized at once
//! without branching, and of several unanswered calls that do the same
//! thing only one is tried.

use std::collections::HashSet;
use std::hash::Hash;

/// A sequential specification: the states an object can be in and what each
/// operation may do to them.
pub trait Specification {
    type State: Clone + Eq + Hash;
    type Op: PartialEq;
    /// Why an operation cannot take effect in a state.
    type Refusal;

    fn initial(&self) -> Self::State;

    /// Every state `op` may leave behind when it takes effect in `state`
    /// (never none), or why it cannot take effect there.
    fn step(&self, state: &Self::State, op: &Self::Op) -> Result<Vec<Self::State>, Self::Refusal>;

    /// `op` is legal in `state` and leaves it as it is, and the same holds in
    /// every state reachable from `state` in which `op` is legal. Such a call
    /// can be linearized the moment it may be (see [`search`]). Answering
    /// `false` is always sound, only slower.
    fn is_stable(&self, state: &Self::State, op: &Self::Op) -> bool;
}

/// One call of the history: invoked at `invoked`, answered at `responded`.
/// A call without a response may take effect at any point after its
/// invocation, or never: it stays concurrent with every later call.
/// Times are milliseconds; a call answered at `t` precedes only calls
/// invoked after `t` (equal milliseconds are concurrent).
#[derive(Debug, Clone, PartialEq)]
pub struct Call<Op> {
    pub invoked: u64,
    pub responded: Option<u64>,
    pub op: Op,
}

/// Where the search got stuck deepest: the answered call that could not take
/// effect next, in the state it would have met.
#[derive(Debug, Clone, PartialEq)]
pub struct Blocked<R> {
    /// The index of the call in the searched history.
    pub call: usize,
    pub refusal: R,
    /// How many calls had been linearized before it.
    pub linearized: usize,
}

/// What the search found.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict<R> {
    Linearizable,
    NotLinearizable(Blocked<R>),
    /// More than the budget of configurations would have had to be explored.
    Undecided,
}

/// Whether some order of `calls` that respects real time is a legal run of
/// `spec` from its initial state, exploring at most `budget` configurations.
pub fn search<S: Specification>(
    spec: &S,
    calls: &[Call<S::Op>],
    budget: usize,
) -> Verdict<S::Refusal> {
    search_from(spec, spec.initial(), calls, budget)
}

/// [`search`] from another state than the initial one.
pub fn search_from<S: Specification>(
    spec: &S,
    start: S::State,
    calls: &[Call<S::Op>],
    budget: usize,
) -> Verdict<S::Refusal> {
    let mut explored: HashSet<(Linearized, S::State)> = HashSet::new();
    let mut deepest: Option<Blocked<S::Refusal>> = None;
    let mut stack = vec![(Linearized::none(calls.len()), start)];
    while let Some((mut done, state)) = stack.pop() {
        settle(spec, calls, &mut done, &state);
        if calls
            .iter()
            .enumerate()
            .all(|(i, c)| c.responded.is_none() || done.contains(i))
        {
            return Verdict::Linearizable;
        }
        if !explored.insert((done.clone(), state.clone())) {
            continue;
        }
        if explored.len() > budget {
            return Verdict::Undecided;
        }

        let deadline = deadline(calls, &done);
        let mut children = Vec::new();
        // The refused answered candidate with the earliest response: the
        // one whose turn has come.
        let mut refused: Option<(u64, usize, S::Refusal)> = None;
        let mut unanswered_tried: Vec<&S::Op> = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            if done.contains(i) || call.invoked > deadline {
                continue;
            }
            if call.responded.is_none() {
                // Two unanswered calls that do the same thing are
                // interchangeable: both may take effect now, and either stays
                // able to later (being unanswered, it precedes nothing and
                // never stops being a candidate), so trying one is enough.
                if unanswered_tried.contains(&&call.op) {
                    continue;
                }
                unanswered_tried.push(&call.op);
            }
            match spec.step(&state, &call.op) {
                Ok(next) => {
                    for next in next {
                        // An unanswered call that changes nothing might as
                        // well never take effect: it precedes no call.
                        if call.responded.is_none() && next == state {
                            continue;
                        }
                        let mut after = done.clone();
                        after.insert(i);
                        children.push((after, next));
                    }
                }
                Err(refusal) => {
                    if let Some(at) = call.responded
                        && refused.as_ref().is_none_or(|(earliest, ..)| at < *earliest)
                    {
                        refused = Some((at, i, refusal));
                    }
                }
            }
        }
        if children.is_empty()
            && let Some((_, call, refusal)) = refused
            && deepest.as_ref().is_none_or(|d| done.count > d.linearized)
        {
            deepest = Some(Blocked {
                call,
                refusal,
                linearized: done.count,
            });
        }
        // Reversed, so the earliest-sent candidate is explored first.
        stack.extend(children.into_iter().rev());
    }
    match deepest {
        Some(blocked) => Verdict::NotLinearizable(blocked),
        // Unreachable for a specification whose legal steps leave a state:
        // a dead end always has a refused answered candidate (the one with
        // the earliest response is a candidate).
        None => Verdict::Undecided,
    }
}

/// Linearizes every stable candidate until none is left. Sound and complete:
/// if some run from here linearizes a stable candidate `c` later, moving `c`
/// to now keeps it legal (nothing before it must precede it, it is legal
/// now, and where it was it changed nothing, so the calls after it meet the
/// same states); a run that left an unanswered `c` out can take it now too.
fn settle<S: Specification>(
    spec: &S,
    calls: &[Call<S::Op>],
    done: &mut Linearized,
    state: &S::State,
) {
    loop {
        let deadline = deadline(calls, done);
        let mut progressed = false;
        for (i, call) in calls.iter().enumerate() {
            if !done.contains(i) && call.invoked <= deadline && spec.is_stable(state, &call.op) {
                done.insert(i);
                progressed = true;
            }
        }
        if !progressed {
            return;
        }
    }
}

/// The earliest response among the answered calls not yet linearized: a call
/// may take effect next only if it was invoked by then, or an answered call
/// would precede it.
fn deadline<Op>(calls: &[Call<Op>], done: &Linearized) -> u64 {
    calls
        .iter()
        .enumerate()
        .filter(|(i, _)| !done.contains(*i))
        .filter_map(|(_, c)| c.responded)
        .min()
        .unwrap_or(u64::MAX)
}

/// The set of calls linearized so far, as a bit set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Linearized {
    words: Box<[u64]>,
    count: usize,
}

impl Linearized {
    fn none(calls: usize) -> Self {
        Self {
            words: vec![0; calls.div_ceil(64)].into_boxed_slice(),
            count: 0,
        }
    }

    fn contains(&self, i: usize) -> bool {
        self.words[i / 64] & (1 << (i % 64)) != 0
    }

    fn insert(&mut self, i: usize) {
        if !self.contains(i) {
            self.words[i / 64] |= 1 << (i % 64);
            self.count += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A register written once: `Write(v)` from empty, `Read(v)` of the value
    /// written.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Op {
        Write(u8),
        Read(u8),
    }

    struct WriteOnce;

    impl Specification for WriteOnce {
        type State = Option<u8>;
        type Op = Op;
        type Refusal = &'static str;

        fn initial(&self) -> Option<u8> {
            None
        }

        fn step(&self, state: &Option<u8>, op: &Op) -> Result<Vec<Option<u8>>, &'static str> {
            match (state, op) {
                (None, Op::Write(v)) => Ok(vec![Some(*v)]),
                (Some(_), Op::Write(_)) => Err("written twice"),
                (Some(s), Op::Read(v)) if s == v => Ok(vec![*state]),
                (_, Op::Read(_)) => Err("read another value"),
            }
        }

        fn is_stable(&self, state: &Option<u8>, op: &Op) -> bool {
            matches!((state, op), (Some(s), Op::Read(v)) if s == v)
        }
    }

    fn call(invoked: u64, responded: Option<u64>, op: Op) -> Call<Op> {
        Call {
            invoked,
            responded,
            op,
        }
    }

    #[test]
    fn a_read_overlapping_its_write_is_linearizable_one_before_it_is_not() {
        let overlapping = [
            call(0, Some(10), Op::Read(1)),
            call(5, Some(15), Op::Write(1)),
        ];
        assert_eq!(search(&WriteOnce, &overlapping, 100), Verdict::Linearizable);
        let before = [
            call(0, Some(4), Op::Read(1)),
            call(5, Some(15), Op::Write(1)),
        ];
        assert_eq!(
            search(&WriteOnce, &before, 100),
            Verdict::NotLinearizable(Blocked {
                call: 0,
                refusal: "read another value",
                linearized: 0
            })
        );
    }

    #[test]
    fn equal_milliseconds_are_concurrent() {
        let touching = [
            call(0, Some(5), Op::Read(1)),
            call(5, Some(15), Op::Write(1)),
        ];
        assert_eq!(search(&WriteOnce, &touching, 100), Verdict::Linearizable);
    }

    #[test]
    fn an_unanswered_call_may_take_effect_long_after_it_was_sent_or_never() {
        // The write got no answer; the read, sent long after, saw it.
        let late = [
            call(0, None, Op::Write(7)),
            call(100, Some(110), Op::Read(7)),
        ];
        assert_eq!(search(&WriteOnce, &late, 100), Verdict::Linearizable);
        // Nobody saw it: it need not have happened.
        let never = [
            call(0, None, Op::Write(7)),
            call(100, Some(110), Op::Write(8)),
        ];
        assert_eq!(search(&WriteOnce, &never, 100), Verdict::Linearizable);
    }

    #[test]
    fn the_deepest_refusal_is_reported() {
        let history = [
            call(0, Some(10), Op::Write(1)),
            call(20, Some(30), Op::Read(1)),
            call(40, Some(50), Op::Read(2)),
        ];
        match search(&WriteOnce, &history, 100) {
            Verdict::NotLinearizable(blocked) => {
                assert_eq!((blocked.call, blocked.linearized), (2, 2));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_search_over_its_budget_is_undecided() {
        let history: Vec<_> = (0..40)
            .map(|i| call(0, None, Op::Write(i)))
            .chain([call(0, Some(100), Op::Read(200))])
            .collect();
        assert_eq!(search(&WriteOnce, &history, 10), Verdict::Undecided);
        assert!(matches!(
            search(&WriteOnce, &history, 1000),
            Verdict::NotLinearizable(_)
        ));
    }
}
