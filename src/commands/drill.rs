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

/// An invariant broke: the drill's report says which.
#[derive(Debug, thiserror::Error)]
#[error("invariants broken ({checks}); see {report}")]
pub struct InvariantsBroken {
    checks: String,
    report: String,
}

pub async fn run(command: DrillCommand) -> anyhow::Result<()> {
    match command {
        DrillCommand::Failover(args) => {
            let outcome = once_drill::run(args).await?;
            println!("report: {}", outcome.report_dir.join("report.md").display());
            if !outcome.fault_injected {
                eprintln!(
                    "warning: the fault was not injected; this drill proves nothing about failover"
                );
            }
            if outcome.invariant_broken() {
                return Err(InvariantsBroken {
                    checks: outcome.failed_checks.join(", "),
                    report: outcome.report_dir.display().to_string(),
                }
                .into());
            }
            Ok(())
        }
        DrillCommand::Chaos(args) => {
            let outcome = once_drill::chaos::run(args).await?;
            let report = &outcome.report;
            println!("report: {}", outcome.report_dir.join("report.md").display());
            println!(
                "seed {}: {} faults, {} operations, {} attempts",
                report.seed,
                report.faults.len(),
                report.operations,
                report.attempts
            );
            let unseen: Vec<&str> = report
                .faults
                .iter()
                .filter(|f| !f.took_effect)
                .map(|f| f.nemesis.name())
                .collect();
            if !unseen.is_empty() {
                eprintln!(
                    "warning: {} faults were not seen taking effect ({})",
                    unseen.len(),
                    unseen.join(", ")
                );
            }
            if !report.invariants_held {
                let failed: Vec<&str> = report
                    .checks
                    .iter()
                    .filter(|c| !c.passed)
                    .map(|c| c.name.as_str())
                    .collect();
                return Err(InvariantsBroken {
                    checks: failed.join(", "),
                    report: outcome.report_dir.display().to_string(),
                }
                .into());
            }
            Ok(())
        }
    }
}
