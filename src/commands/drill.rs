//! `once drill failover`: rehearse losing a region against a running
//! cluster (`once up`), then check every invariant (the `once-drill`
//! library does the work; this only maps its verdict to the exit code).

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum DrillCommand {
    /// Kill or cut off one region under load, measure, check, report.
    Failover(once_drill::DrillArgs),
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
    }
}
