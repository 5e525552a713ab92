//! The report's files: `report.json`, the charts (`throughput.svg`,
//! `latency.svg`), `report.md`, `report.html` and `evidence.json`, written
//! into the drill's output directory.

use std::path::Path;

use anyhow::Context;

use crate::charts;
use crate::evidence::Evidence;
use crate::report::Report;

/// Writes every file of `report` into `dir`; the charts are drawn from
/// `evidence`'s client log.
pub fn write(report: &Report, dir: &Path, evidence: &Evidence) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))
    };
    write("report.json", &serde_json::to_vec_pretty(report)?)?;
    let charts = charts::render(report, &evidence.log).context("drawing the charts")?;
    for chart in &charts {
        write(chart.file_name, chart.svg.as_bytes())?;
    }
    let document = report.document(charts);
    write("report.md", document.markdown().as_bytes())?;
    write("report.html", document.html().as_bytes())?;
    write("evidence.json", &serde_json::to_vec_pretty(evidence)?)?;
    Ok(())
}
