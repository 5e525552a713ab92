//! `once drill failover`: rehearse losing a region against a running
//! cluster (`once up`), then check every invariant; `once drill chaos`:
//! mixed faults from seeded nemeses, then every invariant and
//! linearizability (the `once-drill` library does the work; this only maps
//! its verdict to the exit code).

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum DrillCommand {
    /// Kill or cut off one region under load, measure, check, report.
    Failover(once_drill::DrillArgs),
    /// Mixed, seeded faults under load; every invariant and linearizability.
    Chaos(once_drill::chaos::ChaosArgs),
}

/// The drill does not prove what it set out to: an invariant broke, a fault
/// did not take effect, or tenants were left away from home. The report's
/// headline says which.
#[derive(Debug, thiserror::Error)]
#[error("{verdict}; see {report}")]
pub struct DrillFailed {
    verdict: String,
    report: String,
}

pub async fn run(command: DrillCommand) -> anyhow::Result<()> {
    let (passed, verdict, dir) = match command {
        DrillCommand::Failover(args) => {
            let outcome = once_drill::run(args).await?;
            (outcome.passed, outcome.verdict, outcome.report_dir)
        }
        DrillCommand::Chaos(args) => {
            let outcome = once_drill::chaos::run(args).await?;
            let report = &outcome.report;
            println!(
                "seed {}: {} faults, {} operations, {} attempts",
                report.seed,
                report.faults.len(),
                report.operations,
                report.attempts
            );
            (report.passed, report.verdict.clone(), outcome.report_dir)
        }
    };
    println!("report: {}", dir.join("report.md").display());
    println!("verdict: {verdict}");
    if passed {
        Ok(())
    } else {
        Err(DrillFailed {
            verdict,
            report: dir.display().to_string(),
        }
        .into())
    }
}
