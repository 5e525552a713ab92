//! The drill's report: `report.json` (machine-readable) and `report.md` (a
//! timeline, the measured times and the checks for people), plus the raw
//! evidence (`evidence.json`: client log, payments, ledger, store records)
//! so a violation can be investigated after the cluster is gone.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::check::CheckResult;
use crate::client_log::{EpochMillis, now_ms};
use crate::evidence::Evidence;
use crate::failback::FailbackResult;
use crate::fault::FaultMode;
use crate::measure::Measurements;

/// One moment of the drill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub at: EpochMillis,
    /// `at` as RFC 3339, for people reading the JSON.
    pub time: String,
    pub what: String,
}

/// The drill's events in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline(pub Vec<Event>);

impl Timeline {
    pub fn record(&mut self, what: impl Into<String>) -> EpochMillis {
        let at = now_ms();
        self.record_at(at, what);
        at
    }

    pub fn record_at(&mut self, at: EpochMillis, what: impl Into<String>) {
        let what = what.into();
        tracing::info!(%what, "drill");
        self.0.push(Event {
            at,
            time: rfc3339(at),
            what,
        });
        self.0.sort_by_key(|e| e.at);
    }
}

fn rfc3339(at: EpochMillis) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(at)).to_string()
}

/// How the fault went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultReport {
    pub mode: FaultMode,
    pub injected: bool,
    pub at: Option<EpochMillis>,
    pub steps: Vec<String>,
    /// Why the fault could not be injected, or not whole (a process that
    /// could not be killed), or not healed.
    pub error: Option<String>,
}

/// Counts of what the checker read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceSummary {
    pub payment_rows_by_region: std::collections::BTreeMap<String, usize>,
    pub ledger_entries: usize,
    pub store_records: Option<usize>,
    /// The member the store records were read from, and why it.
    #[serde(default)]
    pub store_member: Option<String>,
    pub gaps: Vec<String>,
}

impl EvidenceSummary {
    pub fn of(evidence: &Evidence) -> Self {
        let mut by_region = std::collections::BTreeMap::new();
        for row in &evidence.payments {
            *by_region.entry(row.database.clone()).or_insert(0) += 1;
        }
        Self {
            payment_rows_by_region: by_region,
            ledger_entries: evidence.ledger.len(),
            store_records: evidence.store_records.as_ref().map(Vec::len),
            store_member: evidence.store_member.clone(),
            gaps: evidence.gaps.clone(),
        }
    }
}

/// Everything `report.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub cluster: String,
    pub region: String,
    pub duration_seconds: u64,
    pub rate: u32,
    pub timeline: Timeline,
    pub fault: FaultReport,
    pub measurements: Measurements,
    pub failback: Option<FailbackResult>,
    pub evidence: EvidenceSummary,
    pub checks: Vec<CheckResult>,
    /// Every check passed.
    pub invariants_held: bool,
}

impl Report {
    /// Writes `report.json`, `report.md` and `evidence.json` into `dir`.
    pub fn write(&self, dir: &Path, evidence: &Evidence) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let write = |name: &str, bytes: Vec<u8>| {
            let path = dir.join(name);
            std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))
        };
        write("report.json", serde_json::to_vec_pretty(self)?)?;
        write("report.md", self.markdown().into_bytes())?;
        write("evidence.json", serde_json::to_vec_pretty(evidence)?)?;
        Ok(())
    }

    /// The report for people.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let verdict = if self.invariants_held {
            "every invariant held"
        } else {
            "INVARIANTS BROKEN"
        };
        let _ = writeln!(
            md,
            "# Failover drill: region {}, {} — {verdict}\n",
            self.region,
            match self.fault.mode {
                FaultMode::Kill => "kill",
                FaultMode::Partition => "partition",
            }
        );
        let _ = writeln!(
            md,
            "Cluster `{}`, {} s at {} payments/s.\n",
            self.cluster, self.duration_seconds, self.rate
        );
        if !self.fault.injected {
            let _ = writeln!(
                md,
                "**The fault was not injected**: {}. The checks below cover the load, not a failover.\n",
                self.fault.error.as_deref().unwrap_or("unknown reason")
            );
        } else if let Some(e) = &self.fault.error {
            let _ = writeln!(md, "**The fault did not go entirely as planned**: {e}.\n");
        }
        let _ = writeln!(md, "## Timeline\n");
        let start = self.timeline.0.first().map_or(0, |e| e.at);
        for event in &self.timeline.0 {
            let offset = event.at.saturating_sub(start) as f64 / 1000.0;
            let _ = writeln!(md, "- `+{offset:7.3}s` {} — {}", event.time, event.what);
        }
        let m = &self.measurements;
        let ms = |v: Option<u64>| v.map_or_else(|| "—".to_owned(), |v| format!("{v} ms"));
        let _ = writeln!(md, "\n## Measured\n");
        if m.fault_at.is_none() {
            let _ = writeln!(
                md,
                "No fault, so no detection or recovery times; the load's numbers follow.\n"
            );
        }
        let _ = writeln!(
            md,
            "Times and rates are the load's (attempts answered by its end), not the failback's or the final replays'.\n"
        );
        let _ = writeln!(
            md,
            "| tenant | detection | time to recover |\n|---|---|---|"
        );
        for t in &m.tenants {
            let _ = writeln!(
                md,
                "| {} | {} | {} |",
                t.tenant,
                ms(t.detection_ms),
                ms(t.recovery_ms)
            );
        }
        let _ = writeln!(
            md,
            "| **max** | {} | {} |\n",
            ms(m.max_detection_ms),
            ms(m.max_recovery_ms)
        );
        if !m.never_recovered.is_empty() {
            let _ = writeln!(
                md,
                "Never recovered during the drill: {}\n",
                m.never_recovered.join(", ")
            );
        }
        let _ = writeln!(
            md,
            "{} operations ({} answered, {} unanswered), {} attempts; {:.1} successes/s, {:.1} attempts/s.\n",
            m.operations,
            m.answered,
            m.unanswered,
            m.attempts,
            m.successes_per_second,
            m.attempts_per_second
        );
        let _ = writeln!(
            md,
            "Client-visible errors (some are the expected answers to planted requests):\n"
        );
        let _ = writeln!(md, "| answer | attempts |\n|---|---|");
        for (class, n) in &m.errors {
            let _ = writeln!(md, "| {class} | {n} |");
        }
        if let Some(f) = &self.failback {
            let _ = writeln!(md, "\n## Failback\n");
            let _ = writeln!(
                md,
                "Router answered {}; {}.",
                f.router_status
                    .map_or_else(|| "nothing".to_owned(), |s| s.to_string()),
                match f.home_again_at {
                    Some(at) => format!(
                        "tenants served by {} again after {} ms",
                        self.region,
                        at.saturating_sub(f.requested_at)
                    ),
                    None => format!("still not home: {}", f.not_home.join(", ")),
                }
            );
        }
        let _ = writeln!(md, "\n## Checks\n");
        for check in &self.checks {
            let mark = if check.passed { "pass" } else { "FAIL" };
            let _ = writeln!(
                md,
                "- **{mark}** {} ({}) — {}",
                check.name,
                check.invariant,
                check.notes.join("; ")
            );
            for v in check.violations.iter().take(20) {
                let _ = writeln!(md, "  - {}: `{}`", v.what, v.evidence);
            }
            if check.violations.len() > 20 {
                let _ = writeln!(
                    md,
                    "  - … {} more in report.json",
                    check.violations.len() - 20
                );
            }
        }
        let e = &self.evidence;
        let _ = writeln!(
            md,
            "\nEvidence: payment rows by region {:?}, {} ledger entries, {} store records{}.",
            e.payment_rows_by_region,
            e.ledger_entries,
            e.store_records
                .map_or_else(|| "no".to_owned(), |n| n.to_string()),
            e.store_member
                .as_ref()
                .map_or_else(String::new, |m| format!(" (from {m})"))
        );
        for gap in &e.gaps {
            let _ = writeln!(md, "- could not read {gap}");
        }
        md
    }
}
