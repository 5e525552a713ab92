//! Faults armed for the next N charges, and the outage switch: while the
//! provider is out, every charge and every lookup answers `503`, as a real
//! provider's API does during an incident (charges already in flight still
//! finish).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultMode {
    Latency,
    ErrorBeforeCharge,
    TimeoutAfterCharge,
    ResetAfterCharge,
    Decline,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultSpec {
    pub mode: FaultMode,
    /// How many upcoming charges the fault applies to.
    #[serde(default = "one")]
    pub count: u32,
    /// For `latency`: milliseconds to wait before answering.
    #[serde(default)]
    pub ms: u64,
}

fn one() -> u32 {
    1
}

/// The armed faults, consumed one charge at a time in the order armed.
#[derive(Debug, Default)]
pub struct Faults {
    // A std mutex: held for a vector pop, never across an await.
    armed: Mutex<Vec<FaultSpec>>,
    out: AtomicBool,
}

impl Faults {
    pub fn arm(&self, spec: FaultSpec) {
        self.armed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(spec);
    }

    pub fn armed(&self) -> Vec<FaultSpec> {
        self.armed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn clear(&self) {
        self.armed.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Starts (`true`) or ends (`false`) an outage.
    pub fn set_outage(&self, out: bool) {
        self.out.store(out, Ordering::SeqCst);
    }

    /// Whether the provider is out now.
    pub fn in_outage(&self) -> bool {
        self.out.load(Ordering::SeqCst)
    }

    /// The fault for the charge being made now, if any.
    pub fn take(&self) -> Option<FaultSpec> {
        let mut armed = self.armed.lock().unwrap_or_else(|p| p.into_inner());
        let first = armed.first_mut()?;
        let spec = first.clone();
        first.count = first.count.saturating_sub(1);
        if first.count == 0 {
            armed.remove(0);
        }
        Some(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_apply_to_the_next_n_charges_in_order() {
        let faults = Faults::default();
        faults.arm(FaultSpec {
            mode: FaultMode::Decline,
            count: 2,
            ms: 0,
        });
        faults.arm(FaultSpec {
            mode: FaultMode::Latency,
            count: 1,
            ms: 5,
        });
        let modes: Vec<_> = std::iter::from_fn(|| faults.take())
            .map(|f| f.mode)
            .collect();
        assert_eq!(
            modes,
            [FaultMode::Decline, FaultMode::Decline, FaultMode::Latency]
        );
    }
}
