//! The chaos run's report: `report.json` (everything, machine-readable),
//! `report.md` and `report.html` (the same [`Document`]: the verdict — which
//! counts only what the run saw: broken invariants, faults that did not take
//! effect, tenants left away from home, each named in the headline —, the
//! seed and the command that repeats the run, the schedule of faults with
//! what was done and seen, answers by code, the linearizability verdict
//! with the smallest failing sub-history of each violation, every invariant
//! check), the two charts with each fault shaded, and `evidence.json`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::chaos::nemesis::Nemesis;
use crate::chaos::record::FaultRecord;
use crate::charts::{self, Interval, Markers, Moment};
use crate::check::CheckResult;
use crate::client_log::{ClientLog, EpochMillis};
use crate::document::{Block, Chart, Document, Item, Line};
use crate::evidence::Evidence;
use crate::homecoming::Homecoming;
use crate::idempotence::ResendCounts;
use crate::linearizability::Linearizability;
use crate::report::{EvidenceSummary, Timeline, checks_block, evidence_blocks};

/// How often each nemesis struck, and how often it was seen taking effect.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NemesisCount {
    pub injected: usize,
    pub took_effect: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChaosReport {
    pub cluster: String,
    pub seed: u64,
    pub nemeses: Vec<Nemesis>,
    pub duration_seconds: u64,
    pub rate: u32,
    /// The command that repeats this run's schedule.
    pub command: String,
    pub load_started_at: EpochMillis,
    pub load_ended_at: EpochMillis,
    pub timeline: Timeline,
    pub faults: Vec<FaultRecord>,
    pub by_nemesis: BTreeMap<Nemesis, NemesisCount>,
    /// Logical operations and HTTP attempts the clients made.
    pub operations: usize,
    pub attempts: usize,
    /// Attempts by answer (`201`, `409 IDEMPOTENCY_REQUEST_IN_PROGRESS`,
    /// `no answer`, …).
    pub answers: BTreeMap<String, usize>,
    pub linearizability: Linearizability,
    /// The idempotence workload's resends by kind (all zero without
    /// `--resend-share`); their violations are the `idempotent resends`
    /// check's.
    #[serde(default)]
    pub resends: ResendCounts,
    pub evidence: EvidenceSummary,
    pub checks: Vec<CheckResult>,
    /// Every check passed, linearizability included.
    pub invariants_held: bool,
    /// The tenants failed back at the end, and any left away.
    #[serde(default)]
    pub homecoming: Homecoming,
    /// The headline: `no violation` only when every invariant held, every
    /// fault took effect and every tenant is home; else what went wrong,
    /// e.g. `2 of 7 faults did not take effect`.
    #[serde(default)]
    pub verdict: String,
    /// The run proves what it says: the binary exits non-zero when not.
    #[serde(default)]
    pub passed: bool,
}

/// The headline of a run: what it saw, nothing it did not.
pub fn verdict(
    invariants_held: bool,
    faults: &[FaultRecord],
    homecoming: &Homecoming,
) -> (String, bool) {
    let mut problems = Vec::new();
    if !invariants_held {
        problems.push("VIOLATIONS FOUND".to_owned());
    }
    let without_effect = faults.iter().filter(|f| !f.took_effect).count();
    if without_effect > 0 {
        problems.push(format!(
            "{without_effect} of {} faults did not take effect",
            faults.len()
        ));
    }
    if faults.is_empty() {
        problems.push("no fault was applied".to_owned());
    }
    if let Some(e) = &homecoming.error {
        problems.push(format!("tenants' homes unknown ({e})"));
    } else if !homecoming.left_away.is_empty() {
        problems.push(format!(
            "{} tenant(s) left away from home",
            homecoming.left_away.len()
        ));
    }
    if problems.is_empty() {
        ("no violation".to_owned(), true)
    } else {
        (problems.join("; "), false)
    }
}

impl ChaosReport {
    /// Sets [`Self::verdict`] and [`Self::passed`] from the rest.
    pub fn with_verdict(mut self) -> Self {
        (self.verdict, self.passed) = verdict(self.invariants_held, &self.faults, &self.homecoming);
        self
    }

    pub fn count(faults: &[FaultRecord]) -> BTreeMap<Nemesis, NemesisCount> {
        let mut counts: BTreeMap<Nemesis, NemesisCount> = BTreeMap::new();
        for fault in faults {
            let count = counts.entry(fault.nemesis).or_default();
            count.injected += 1;
            count.took_effect += usize::from(fault.took_effect);
        }
        counts
    }

    pub fn answers(log: &ClientLog) -> BTreeMap<String, usize> {
        let mut answers = BTreeMap::new();
        for attempt in &log.attempts {
            *answers.entry(attempt.error_class()).or_insert(0) += 1;
        }
        answers
    }

    /// Each fault shaded from its start to its healing, the end of the
    /// load marked.
    fn markers(&self) -> Markers {
        let seconds = |at: EpochMillis| at.saturating_sub(self.load_started_at) as f64 / 1000.0;
        Markers {
            moments: vec![Moment {
                at: seconds(self.load_ended_at),
                what: "load ended",
            }],
            intervals: self
                .faults
                .iter()
                .map(|f| Interval {
                    from: seconds(f.started_at),
                    to: seconds(f.healed_at.unwrap_or(f.started_at).max(f.started_at)),
                    what: f.nemesis.name(),
                })
                .collect(),
        }
    }

    pub fn document(&self, charts: Vec<Chart>) -> Document {
        let mut doc = Document::new(format!("Chaos drill, seed {}: {}", self.seed, self.verdict));
        doc.push(Block::Paragraph(
            Line::default()
                .text(format!(
                    "{} s of load at {}/s with nemeses {}; {} faults; {} operations, {} attempts; {}. Repeat with ",
                    self.duration_seconds,
                    self.rate,
                    self.nemeses
                        .iter()
                        .map(|n| n.name())
                        .collect::<Vec<_>>()
                        .join(","),
                    self.faults.len(),
                    self.operations,
                    self.attempts,
                    self.resends.summary()
                ))
                .code(self.command.clone())
                .text("."),
        ));
        doc.push(Block::Heading("Faults by nemesis".into()));
        doc.push(Block::Table {
            head: vec![
                "nemesis".into(),
                "injected".into(),
                "seen taking effect".into(),
            ],
            rows: self
                .by_nemesis
                .iter()
                .map(|(n, c)| {
                    vec![
                        n.name().into(),
                        c.injected.to_string().into(),
                        c.took_effect.to_string().into(),
                    ]
                })
                .collect(),
        });
        let unseen: Vec<&FaultRecord> = self.faults.iter().filter(|f| !f.took_effect).collect();
        if !unseen.is_empty() {
            doc.push(Block::Paragraph(
                Line::default()
                    .strong(format!(
                        "{} of {} faults did not take effect",
                        unseen.len(),
                        self.faults.len()
                    ))
                    .text(": the run proves nothing about them, and fails."),
            ));
            doc.push(Block::List(
                unseen
                    .iter()
                    .map(|f| {
                        Line::default()
                            .strong(f.nemesis.name())
                            .text(format!(
                                " {}: {}",
                                f.description,
                                if f.errors.is_empty() {
                                    "nothing seen acting".to_owned()
                                } else {
                                    f.errors.join("; ")
                                }
                            ))
                            .into()
                    })
                    .collect(),
            ));
        }
        doc.push(Block::Heading("Tenants at the end".into()));
        doc.push(Block::Paragraph(self.homecoming.summary().into()));
        if !self.homecoming.failbacks.is_empty() {
            doc.push(Block::List(
                self.homecoming
                    .failbacks
                    .iter()
                    .map(|f| {
                        Line::from(format!(
                            "failback of {} requested: router answered {}",
                            f.region,
                            f.router_status
                                .map_or("nothing".to_owned(), |s| s.to_string())
                        ))
                        .into()
                    })
                    .collect(),
            ));
        }
        doc.push(Block::Heading("Schedule".into()));
        doc.push(Block::List(
            self.faults
                .iter()
                .map(|f| {
                    let time = |at: EpochMillis| {
                        format!(
                            "+{:.1} s",
                            at.saturating_sub(self.load_started_at) as f64 / 1000.0
                        )
                    };
                    let mut nested: Vec<Line> = Vec::new();
                    nested.extend(
                        f.done
                            .iter()
                            .map(|n| format!("{} did: {}", time(n.at), n.what).into()),
                    );
                    nested.extend(f.seen.iter().map(|n| {
                        Line::default()
                            .text(format!("{} ", time(n.at)))
                            .strong("saw")
                            .text(format!(": {}", n.what))
                    }));
                    nested.extend(
                        f.errors
                            .iter()
                            .map(|e| Line::default().strong("error").text(format!(": {e}"))),
                    );
                    Item {
                        line: Line::default().strong(f.nemesis.name()).text(format!(
                            " {} — {}, healed {}, healthy again {}{}",
                            time(f.started_at),
                            f.description,
                            f.healed_at.map_or("never".to_owned(), time),
                            f.recovered_at.map_or("not seen".to_owned(), time),
                            if f.took_effect {
                                ""
                            } else {
                                " — NOT SEEN TAKING EFFECT"
                            }
                        )),
                        nested,
                    }
                })
                .collect(),
        ));
        doc.push(Block::Heading("Charts".into()));
        doc.blocks.extend(charts.into_iter().map(Block::Chart));
        doc.push(Block::Heading("Answers".into()));
        doc.push(Block::Table {
            head: vec!["answer".into(), "attempts".into()],
            rows: self
                .answers
                .iter()
                .map(|(k, v)| vec![k.clone().into(), v.to_string().into()])
                .collect(),
        });
        doc.push(Block::Heading("Linearizability".into()));
        let l = &self.linearizability;
        doc.push(Block::Paragraph(
            format!(
                "{} scoped keys, {} attempts ({} indeterminate) checked against the idempotency contract's sequential model: {} violations, {} undecided.",
                l.keys,
                l.attempts,
                l.indeterminate,
                l.violations.len(),
                l.undecided.len()
            )
            .into(),
        ));
        if !l.violations.is_empty() {
            doc.push(Block::List(
                l.violations
                    .iter()
                    .take(20)
                    .map(|v| Item {
                        line: Line::default()
                            .strong(format!("{} / {}", v.tenant, v.key))
                            .text(format!(": {}", v.why)),
                        nested: v
                            .history
                            .iter()
                            .map(|h| {
                                Line::default().code(format!(
                                    "op {} sent {} answered {:?}: {}",
                                    h.op, h.sent_at, h.answered_at, h.outcome
                                ))
                            })
                            .collect(),
                    })
                    .collect(),
            ));
        }
        doc.push(Block::Heading("Checks".into()));
        doc.push(checks_block(&self.checks));
        doc.blocks.extend(evidence_blocks(&self.evidence));
        doc.push(Block::Heading("Timeline".into()));
        doc.push(Block::List(
            self.timeline
                .0
                .iter()
                .map(|e| Line::from(format!("{} {}", e.time, e.what)).into())
                .collect(),
        ));
        doc
    }

    /// Writes every file of the report into `dir`.
    pub fn write(&self, dir: &Path, evidence: &Evidence) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.join(name);
            std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))
        };
        write("report.json", &serde_json::to_vec_pretty(self)?)?;
        let charts = charts::render_with(&evidence.log, self.load_started_at, &self.markers())
            .context("drawing the charts")?;
        for chart in &charts {
            write(chart.file_name, chart.svg.as_bytes())?;
        }
        let document = self.document(charts);
        write("report.md", document.markdown().as_bytes())?;
        write("report.html", document.html().as_bytes())?;
        write("evidence.json", &serde_json::to_vec_pretty(evidence)?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::nemesis::Fault;
    use crate::homecoming::TenantAway;

    fn fault(took_effect: bool) -> FaultRecord {
        let mut record = FaultRecord::begin(&Fault::Restart);
        record.took_effect = took_effect;
        record
    }

    #[test]
    fn no_violation_is_said_only_of_a_run_that_saw_every_fault_and_brought_every_tenant_home() {
        let home = Homecoming::default();
        assert_eq!(
            verdict(true, &[fault(true), fault(true)], &home),
            ("no violation".to_owned(), true)
        );
        let (said, passed) = verdict(true, &[fault(true), fault(false)], &home);
        assert_eq!(said, "1 of 2 faults did not take effect");
        assert!(!passed);
        let away = Homecoming {
            left_away: vec![TenantAway {
                tenant: "acme".into(),
                home: "ap-south".into(),
                preferred_home: "eu-west".into(),
            }],
            ..Homecoming::default()
        };
        let (said, passed) = verdict(false, &[fault(false)], &away);
        assert_eq!(
            said,
            "VIOLATIONS FOUND; 1 of 1 faults did not take effect; 1 tenant(s) left away from home"
        );
        assert!(!passed);
        assert!(
            !verdict(true, &[], &home).1,
            "a run without faults proves nothing"
        );
    }
}
