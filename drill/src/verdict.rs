//! What one named check concluded: whether it passed, each violation with
//! the evidence that shows it, and notes on what it looked at and could not
//! decide. A module of its own so that an analysis outside [`crate::check`]
//! (the [`crate::linearizability`] checker) can hand the report its verdict
//! without depending on the list of checks that runs it.

use serde::{Deserialize, Serialize};

/// One thing that should not have happened, and what shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Violation {
    pub what: String,
    pub evidence: serde_json::Value,
}

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    pub name: String,
    pub invariant: String,
    pub passed: bool,
    pub violations: Vec<Violation>,
    /// What the check looked at, and what it could not decide.
    pub notes: Vec<String>,
}

impl CheckResult {
    /// A check passes when it found no violation.
    pub(crate) fn new(
        name: &str,
        invariant: &str,
        violations: Vec<Violation>,
        notes: Vec<String>,
    ) -> Self {
        Self {
            name: name.to_owned(),
            invariant: invariant.to_owned(),
            passed: violations.is_empty(),
            violations,
            notes,
        }
    }
}
