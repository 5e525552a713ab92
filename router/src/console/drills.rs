//! Recent failover drill reports for the console: every `*/report.json`
//! under `--drill-reports` (where `once drill failover` writes by default,
//! next to `cluster.json`), newest first, read as the drill wrote them.
//!
//! Only the fields the console shows are read; a report this router cannot
//! parse is listed with the reason, never skipped silently.

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

/// What `report.json` says, in part.
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
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrillReport {
    /// The report's directory name.
    pub name: String,
    pub written_at_ms: u64,
    #[serde(flatten)]
    pub report: Option<ReportSummary>,
    /// Why the report could not be read.
    pub error: Option<String>,
}

fn modified_ms(path: &Path) -> Option<u64> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    let since = modified.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    u64::try_from(since.as_millis()).ok()
}

fn read(path: &Path) -> Result<ReportSummary, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
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
        let broken = dir.path().join("drill-b");
        std::fs::create_dir(&broken).unwrap();
        std::fs::write(broken.join("report.json"), "{").unwrap();
        std::fs::create_dir(dir.path().join("not-a-drill")).unwrap();

        let reports = recent(dir.path());
        assert_eq!(reports.len(), 2);
        let good = reports.iter().find(|r| r.name == "drill-a").unwrap();
        let summary = good.report.as_ref().unwrap();
        assert_eq!(summary.measurements.max_recovery_ms, Some(4100));
        assert_eq!(summary.timeline[0].what, "load started");
        let broken = reports.iter().find(|r| r.name == "drill-b").unwrap();
        assert!(broken.report.is_none() && broken.error.is_some());
        assert!(recent(&dir.path().join("missing")).is_empty());
    }
}
