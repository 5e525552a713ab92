//! What became of one fault: what the drill did, what it saw that proves
//! the fault took effect (a process in state `T`, a clock offset read back,
//! a member refusing a cut region), when it healed and when the cluster
//! was healthy again. This is the report's schedule, entry by entry.

use serde::{Deserialize, Serialize};

use crate::chaos::nemesis::{Fault, Nemesis};
use crate::client_log::{EpochMillis, now_ms};

/// One thing done or seen, at a moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    pub at: EpochMillis,
    pub what: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRecord {
    pub nemesis: Nemesis,
    pub fault: Fault,
    pub description: String,
    pub started_at: EpochMillis,
    /// When its last healing step ended (`None`: it never healed).
    pub healed_at: Option<EpochMillis>,
    /// When the cluster was seen healthy again after it.
    pub recovered_at: Option<EpochMillis>,
    /// What the drill did.
    pub done: Vec<Note>,
    /// What the drill saw that shows the fault acting (and being healed).
    pub seen: Vec<Note>,
    /// The fault was seen taking effect.
    pub took_effect: bool,
    pub errors: Vec<String>,
}

impl FaultRecord {
    pub fn begin(fault: &Fault) -> Self {
        Self {
            nemesis: fault.nemesis(),
            fault: fault.clone(),
            description: fault.describe(),
            started_at: now_ms(),
            healed_at: None,
            recovered_at: None,
            done: Vec::new(),
            seen: Vec::new(),
            took_effect: false,
            errors: Vec::new(),
        }
    }

    pub fn did(&mut self, what: impl Into<String>) {
        let what = what.into();
        tracing::info!(nemesis = self.nemesis.name(), %what, "chaos: did");
        self.done.push(Note { at: now_ms(), what });
    }

    pub fn saw(&mut self, what: impl Into<String>) {
        let what = what.into();
        tracing::info!(nemesis = self.nemesis.name(), %what, "chaos: saw");
        self.seen.push(Note { at: now_ms(), what });
    }

    pub fn failed(&mut self, what: impl std::fmt::Display) {
        let what = format!("{what:#}");
        tracing::warn!(nemesis = self.nemesis.name(), %what, "chaos: failed");
        self.errors.push(what);
    }

    /// Records `result`'s error, if any, and answers its value.
    pub fn check<T, E: std::fmt::Display>(&mut self, result: Result<T, E>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(e) => {
                self.failed(e);
                None
            }
        }
    }
}
