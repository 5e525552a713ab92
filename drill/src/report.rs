//! The drill's report: `report.json` (machine-readable), `report.md` and
//! `report.html` (a timeline, charts over drill time, the measured times and
//! the checks for people; the same [`Document`] rendered twice), the charts'
//! SVG files, plus the raw evidence (`evidence.json`: client log, payments,
//! ledger, store records) so a violation can be investigated after the
//! cluster is gone.

use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::check::CheckResult;
use crate::client_log::{EpochMillis, now_ms};
use crate::document::{Block, Chart, Document, Item, Line};
use crate::evidence::Evidence;
use crate::failback::FailbackResult;
use crate::fault::FaultMode;
use crate::homecoming::Homecoming;
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
    /// When the load started: the origin of the charts' time axis. Absent
    /// from reports written before it was recorded.
    #[serde(default)]
    pub load_started_at: Option<EpochMillis>,
    pub timeline: Timeline,
    pub fault: FaultReport,
    pub measurements: Measurements,
    pub failback: Option<FailbackResult>,
    pub evidence: EvidenceSummary,
    pub checks: Vec<CheckResult>,
    /// Every check passed.
    pub invariants_held: bool,
    /// Where raft-store placed every tenant at the end: with `--failback`
    /// those away are failed back first (any region's: a router may have
    /// counted another region down meanwhile) and any left away fail the
    /// drill; without it they are named (R's stay away, as asked).
    #[serde(default)]
    pub homecoming: Homecoming,
    /// The headline: `every invariant held` only when the fault was injected
    /// and, with `--failback`, every tenant is home again.
    #[serde(default)]
    pub verdict: String,
    /// The drill proves what it says: the binary exits non-zero when not.
    #[serde(default)]
    pub passed: bool,
}

impl Report {
    /// Sets [`Self::verdict`] and [`Self::passed`] from the rest.
    pub fn with_verdict(mut self) -> Self {
        let mut problems = Vec::new();
        if !self.invariants_held {
            problems.push("INVARIANTS BROKEN".to_owned());
        }
        if !self.fault.injected {
            problems.push(
                "the fault was NOT injected (this drill proves nothing about failover)".to_owned(),
            );
        }
        if let Some(failback) = &self.failback
            && failback.home_again_at.is_none()
        {
            problems.push(format!(
                "failback NOT done: {} tenant(s) of {} not home",
                failback.not_home.len(),
                self.region
            ));
        }
        // With --failback the drill promises to end where it started.
        if self.failback.is_some() {
            if let Some(e) = &self.homecoming.error {
                problems.push(format!("tenants' homes unknown ({e})"));
            } else if !self.homecoming.left_away.is_empty() {
                problems.push(format!(
                    "{} tenant(s) left away from home",
                    self.homecoming.left_away.len()
                ));
            }
        }
        (self.verdict, self.passed) = if problems.is_empty() {
            ("every invariant held".to_owned(), true)
        } else {
            (problems.join("; "), false)
        };
        self
    }

    /// The report for people, with `charts` after the timeline.
    pub fn document(&self, charts: Vec<Chart>) -> Document {
        let mut doc = Document::new(format!(
            "Failover drill: region {}, {} — {}",
            self.region,
            match self.fault.mode {
                FaultMode::Kill => "kill",
                FaultMode::Partition => "partition",
            },
            self.verdict
        ));
        doc.push(Block::Paragraph(
            Line::default()
                .text("Cluster ")
                .code(&self.cluster)
                .text(format!(
                    ", {} s at {} payments/s.",
                    self.duration_seconds, self.rate
                )),
        ));
        if !self.fault.injected {
            doc.push(Block::Paragraph(
                Line::default()
                    .strong("The fault was not injected")
                    .text(format!(
                        ": {}. The checks below cover the load, not a failover.",
                        self.fault.error.as_deref().unwrap_or("unknown reason")
                    )),
            ));
        } else if let Some(e) = &self.fault.error {
            doc.push(Block::Paragraph(
                Line::default()
                    .strong("The fault did not go entirely as planned")
                    .text(format!(": {e}.")),
            ));
        }
        doc.push(Block::Paragraph(self.homecoming.summary().into()));
        doc.push(Block::Heading("Timeline".into()));
        let start = self.timeline.0.first().map_or(0, |e| e.at);
        doc.push(Block::List(
            self.timeline
                .0
                .iter()
                .map(|event| {
                    let offset = event.at.saturating_sub(start) as f64 / 1000.0;
                    Line::default()
                        .code(format!("+{offset:7.3}s"))
                        .text(format!(" {} — {}", event.time, event.what))
                        .into()
                })
                .collect(),
        ));
        doc.push(Block::Heading("Charts".into()));
        doc.push(Block::Paragraph(
            "Seconds since the load started; every attempt of the drill counted in the second \
             it was answered. Lines mark the fault, failback and the end of the load; shaded \
             spans run from the fault to the slowest detection and recovery."
                .into(),
        ));
        doc.blocks.extend(charts.into_iter().map(Block::Chart));

        let m = &self.measurements;
        let ms = |v: Option<u64>| v.map_or_else(|| "—".to_owned(), |v| format!("{v} ms"));
        doc.push(Block::Heading("Measured".into()));
        if m.fault_at.is_none() {
            doc.push(Block::Paragraph(
                "No fault, so no detection or recovery times; the load's numbers follow.".into(),
            ));
        }
        doc.push(Block::Paragraph(
            "Times and rates are the load's (attempts answered by its end), not the failback's or the final replays'."
                .into(),
        ));
        let mut rows: Vec<Vec<Line>> = m
            .tenants
            .iter()
            .map(|t| {
                vec![
                    t.tenant.as_str().into(),
                    ms(t.detection_ms).into(),
                    ms(t.recovery_ms).into(),
                ]
            })
            .collect();
        rows.push(vec![
            Line::default().strong("max"),
            ms(m.max_detection_ms).into(),
            ms(m.max_recovery_ms).into(),
        ]);
        doc.push(Block::Table {
            head: vec![
                "tenant".into(),
                "detection".into(),
                "time to recover".into(),
            ],
            rows,
        });
        if !m.never_recovered.is_empty() {
            doc.push(Block::Paragraph(
                format!(
                    "Never recovered during the drill: {}",
                    m.never_recovered.join(", ")
                )
                .into(),
            ));
        }
        doc.push(Block::Paragraph(
            format!(
                "{} operations ({} answered, {} unanswered), {} attempts; {:.1} successes/s, {:.1} attempts/s.",
                m.operations,
                m.answered,
                m.unanswered,
                m.attempts,
                m.successes_per_second,
                m.attempts_per_second
            )
            .into(),
        ));
        doc.push(Block::Paragraph(
            "Client-visible errors (some are the expected answers to planted requests):".into(),
        ));
        doc.push(Block::Table {
            head: vec!["answer".into(), "attempts".into()],
            rows: m
                .errors
                .iter()
                .map(|(class, n)| vec![class.as_str().into(), n.to_string().into()])
                .collect(),
        });
        if let Some(f) = &self.failback {
            doc.push(Block::Heading("Failback".into()));
            doc.push(Block::Paragraph(
                format!(
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
                )
                .into(),
            ));
        }
        doc.push(Block::Heading("Checks".into()));
        doc.push(checks_block(&self.checks));
        doc.blocks.extend(evidence_blocks(&self.evidence));
        doc
    }
}

/// Every check, passed or failed, with up to 20 violations each.
pub fn checks_block(checks: &[CheckResult]) -> Block {
    Block::List(
        checks
            .iter()
            .map(|check| {
                let mark = if check.passed { "pass" } else { "FAIL" };
                let mut nested: Vec<Line> = check
                    .violations
                    .iter()
                    .take(20)
                    .map(|v| {
                        Line::default()
                            .text(format!("{}: ", v.what))
                            .code(v.evidence.to_string())
                    })
                    .collect();
                if check.violations.len() > 20 {
                    nested.push(
                        format!("… {} more in report.json", check.violations.len() - 20).into(),
                    );
                }
                Item {
                    line: Line::default().strong(mark).text(format!(
                        " {} ({}) — {}",
                        check.name,
                        check.invariant,
                        check.notes.join("; ")
                    )),
                    nested,
                }
            })
            .collect(),
    )
}

/// What the checker read, and what it could not.
pub fn evidence_blocks(e: &EvidenceSummary) -> Vec<Block> {
    let mut blocks = vec![Block::Paragraph(
        format!(
            "Evidence: payment rows by region {:?}, {} ledger entries, {} store records{}.",
            e.payment_rows_by_region,
            e.ledger_entries,
            e.store_records
                .map_or_else(|| "no".to_owned(), |n| n.to_string()),
            e.store_member
                .as_ref()
                .map_or_else(String::new, |m| format!(" (from {m})"))
        )
        .into(),
    )];
    if !e.gaps.is_empty() {
        blocks.push(Block::List(
            e.gaps
                .iter()
                .map(|gap| Line::from(format!("could not read {gap}")).into())
                .collect(),
        ));
    }
    blocks
}
