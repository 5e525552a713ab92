//! Recent drill reports for the console: every `*/report.json` under
//! `--drill-reports` (where `once drill failover` and `once drill chaos`
//! write by default, next to `cluster.json`), newest first, read as the
//! drill wrote them. A chaos report is told apart by its `seed`; each kind
//! is read into its own summary ([`Summary`], tagged `kind` for the page).
//!
//! Only the fields the console shows are read; a report this router cannot
//! parse is listed with the reason, never skipped silently.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// How many reports the console lists.
const RECENT: usize = 5;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimelineEvent {
    pub at: u64,
    pub time: String,
    pub what: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fault {
    pub mode: String,
    pub injected: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    pub max_detection_ms: Option<u64>,
    pub max_recovery_ms: Option<u64>,
    pub successes_per_second: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
}

/// What a failover drill's `report.json` says, in part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReportSummary {
    pub region: String,
    pub duration_seconds: u64,
    pub rate: u32,
    pub fault: Fault,
    pub measurements: Measured,
    pub timeline: Vec<TimelineEvent>,
    pub checks: Vec<Check>,
    pub invariants_held: bool,
    /// The headline and whether the drill proved what it set out to
    /// (absent from reports written before drills had a verdict).
    #[serde(default)]
    pub verdict: Option<String>,
    #[serde(default)]
    pub passed: Option<bool>,
}

/// How often one nemesis struck and took effect.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NemesisCount {
    pub injected: usize,
    pub took_effect: usize,
}

/// One fault of a chaos run, in part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChaosFault {
    pub nemesis: String,
    pub description: String,
    pub took_effect: bool,
}

/// A tenant a drill left away from its preferred home.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantAway {
    pub tenant: String,
    pub home: String,
    pub preferred_home: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Homecoming {
    #[serde(default)]
    pub left_away: Vec<TenantAway>,
    #[serde(default)]
    pub error: Option<String>,
}

/// What a chaos run's `report.json` says, in part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChaosSummary {
    pub seed: u64,
    pub nemeses: Vec<String>,
    pub duration_seconds: u64,
    pub rate: u32,
    pub faults: Vec<ChaosFault>,
    pub by_nemesis: BTreeMap<String, NemesisCount>,
    pub operations: usize,
    pub attempts: usize,
    pub timeline: Vec<TimelineEvent>,
    pub checks: Vec<Check>,
    pub invariants_held: bool,
    #[serde(default)]
    pub homecoming: Option<Homecoming>,
    #[serde(default)]
    pub verdict: Option<String>,
    #[serde(default)]
    pub passed: Option<bool>,
}

/// A report of either drill.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Summary {
    Failover(ReportSummary),
    Chaos(ChaosSummary),
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrillReport {
    /// The report's directory name.
    pub name: String,
    pub written_at_ms: u64,
    #[serde(flatten)]
    pub report: Option<Summary>,
    /// Why the report could not be read.
    pub error: Option<String>,
}

fn modified_ms(path: &Path) -> Option<u64> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    let since = modified.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    u64::try_from(since.as_millis()).ok()
}

fn read(path: &Path) -> Result<Summary, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let report: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    if report.get("seed").is_some() {
        serde_json::from_value(report)
            .map(Summary::Chaos)
            .map_err(|e| format!("a chaos report: {e}"))
    } else {
        serde_json::from_value(report)
            .map(Summary::Failover)
            .map_err(|e| format!("a failover report: {e}"))
    }
}

/// The newest reports under `dir` (none if it does not exist yet).
pub fn recent(dir: &Path) -> Vec<DrillReport> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, String, std::path::PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let path = entry.path().join("report.json");
            let written = modified_ms(&path)?;
            Some((
                written,
                entry.file_name().to_string_lossy().into_owned(),
                path,
            ))
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
    found
        .into_iter()
        .take(RECENT)
        .map(|(written_at_ms, name, path)| {
            let (report, error) = match read(&path) {
                Ok(r) => (Some(r), None),
                Err(e) => (None, Some(e)),
            };
            DrillReport {
                name,
                written_at_ms,
                report,
                error,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_listed_and_broken_ones_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("drill-a");
        std::fs::create_dir(&good).unwrap();
        std::fs::write(
            good.join("report.json"),
            serde_json::json!({
                "cluster": "c", "region": "eu-west", "duration_seconds": 30, "rate": 20,
                "fault": {"mode": "kill", "injected": true, "at": 5, "steps": [], "error": null},
                "measurements": {"max_detection_ms": 900, "max_recovery_ms": 4100,
                                 "successes_per_second": 19.5, "errors": {}},
                "timeline": [{"at": 1, "time": "t", "what": "load started"}],
                "checks": [{"name": "one charge per payment", "passed": true}],
                "invariants_held": true,
            })
            .to_string(),
        )
        .unwrap();
        let chaos = dir.path().join("chaos-c");
        std::fs::create_dir(&chaos).unwrap();
        std::fs::write(
            chaos.join("report.json"),
            serde_json::json!({
                "cluster": "c", "seed": 7, "nemeses": ["kill", "skew"], "duration_seconds": 20,
                "rate": 8, "command": "once drill chaos …", "load_started_at": 1, "load_ended_at": 2,
                "faults": [
                    {"nemesis": "kill", "description": "SIGKILL node-eu-west", "took_effect": true},
                    {"nemesis": "skew", "description": "node-us-east skewed", "took_effect": false},
                ],
                "by_nemesis": {"kill": {"injected": 1, "took_effect": 1},
                               "skew": {"injected": 1, "took_effect": 0}},
                "operations": 100, "attempts": 130, "answers": {},
                "timeline": [{"at": 1, "time": "t", "what": "chaos started"}],
                "checks": [{"name": "linearizable", "passed": true}],
                "invariants_held": true,
                "homecoming": {"away_at_end": [], "failbacks": [],
                               "left_away": [{"tenant": "globex", "home": "ap-south",
                                              "preferred_home": "us-east"}], "error": null},
                "verdict": "1 of 2 faults did not take effect; 1 tenant(s) left away from home",
                "passed": false,
            })
            .to_string(),
        )
        .unwrap();
        let broken = dir.path().join("drill-b");
        std::fs::create_dir(&broken).unwrap();
        std::fs::write(broken.join("report.json"), "{").unwrap();
        std::fs::create_dir(dir.path().join("not-a-drill")).unwrap();

        let reports = recent(dir.path());
        assert_eq!(reports.len(), 3);
        let good = reports.iter().find(|r| r.name == "drill-a").unwrap();
        let Some(Summary::Failover(summary)) = good.report.as_ref() else {
            panic!("{good:?}")
        };
        assert_eq!(summary.measurements.max_recovery_ms, Some(4100));
        assert_eq!(summary.timeline[0].what, "load started");
        let chaos = reports.iter().find(|r| r.name == "chaos-c").unwrap();
        assert!(chaos.error.is_none(), "{chaos:?}");
        let Some(Summary::Chaos(summary)) = chaos.report.as_ref() else {
            panic!("{chaos:?}")
        };
        assert_eq!(summary.seed, 7);
        assert_eq!(summary.by_nemesis["skew"].took_effect, 0);
        assert_eq!(
            summary.homecoming.as_ref().unwrap().left_away[0].tenant,
            "globex"
        );
        // The page tells the kinds apart by `kind`.
        let json = serde_json::to_value(chaos).unwrap();
        assert_eq!(json["kind"], "chaos", "{json}");
        assert_eq!(json["name"], "chaos-c", "{json}");
        let broken = reports.iter().find(|r| r.name == "drill-b").unwrap();
        assert!(broken.report.is_none() && broken.error.is_some());
        assert!(recent(&dir.path().join("missing")).is_empty());
    }
}
