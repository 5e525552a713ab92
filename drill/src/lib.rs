//! `once-drill`: the failover drill (`once drill failover`) and its
//! invariant checker (DESIGN §3, §6).
//!
//! A drill sends paced, retrying payment traffic through the router, kills
//! or partitions one region a third of the way in, optionally fails the
//! region back, asks for every stored answer once more, then gathers every
//! piece of evidence and checks the invariants against it. It measures what
//! clients saw during the load (time to the first failure and to the first
//! success again, errors, throughput) and writes a report. [`run`] is the
//! whole drill; every step is public so a test can drive it piecewise.
//!
//! ```text
//!   load ──POST /payments──► router ──► nodes ──► provider
//!    │ (client log)             ▲ fault: SIGKILL node+store | /admin/partition on
//!    │                          │   every store member and the router
//!    │                          │ failback: POST /admin/failback
//!    │                          │ final replays: every stored answer asked for again
//!    ▼
//!   gather: client log + payments (every region's DB) + provider ledger
//!           + raft-store records (from the leader)
//!    ▼
//!   check (pure) ──► report.json / report.md / report.html
//!                    + throughput.svg / latency.svg / evidence.json
//! ```
//!
//! # Layout
//!
//! - [`cluster`]: `cluster.json`, the description `once up` writes.
//! - [`client_log`]: operations and attempts as the clients saw them.
//! - [`load`]: the paced, retrying clients and the planted requests.
//! - [`resend`]: the idempotence workload — a bounded memory of sent
//!   payments, a share re-sent (same body, other body) through another
//!   region's node.
//! - [`fault`]: kill, and partition behind [`fault::PartitionSwitch`]es
//!   (the region's store member isolated, the other members and the router
//!   cutting the region).
//! - [`control`]: `once up`'s control endpoint, restarting a region's
//!   processes or one process (gracefully or not, clock-skewed, wiped).
//! - [`failback`]: asking the router to fail back and waiting for it.
//! - [`homecoming`]: where raft-store places every tenant at the end, the
//!   tenants away from their preferred home failed back (chaos, and the
//!   failover drill with `--failback`) or named.
//! - [`final_replay`]: every stored answer asked for again after the fault.
//! - [`measure`]: detection, recovery, errors, throughput from the log.
//! - [`evidence`]: what the checker reads, as plain data.
//! - [`gather`]: reading the evidence from a live cluster, read-only.
//! - [`check`]: the invariant checks, pure functions.
//! - [`idempotence`]: the resends judged and counted (same body: the first
//!   answer byte for byte, one payment; other body: `409`).
//! - [`verdict`]: what one check concluded: its violations and notes.
//! - [`linearizability`]: each scoped key's attempts checked for a legal
//!   order under the idempotency contract (Wing–Gong search), a failing
//!   key shrunk to its smallest failing history.
//! - [`report`]: the timeline and the report's content.
//! - [`files`]: the report's files (JSON, Markdown, HTML, SVG, evidence).
//! - [`document`]: the report as a document, rendered to Markdown and to a
//!   self-contained HTML page.
//! - [`chaos`]: `once drill chaos`, mixed faults from seeded nemeses under
//!   the same load, checked for every invariant and for linearizability.
//! - [`charts`]: per-second series from the client log (successes, errors
//!   by answer, p50/p99 latency), drawn as SVG with the fault, failback,
//!   load end, detection and recovery marked.

pub mod chaos;
pub mod charts;
pub mod check;
pub mod client_log;
pub mod cluster;
pub mod control;
pub mod document;
pub mod evidence;
pub mod failback;
pub mod fault;
pub mod files;
pub mod final_replay;
pub mod gather;
pub mod homecoming;
pub mod idempotence;
pub mod linearizability;
pub mod load;
pub mod measure;
pub mod report;
pub mod resend;
pub mod verdict;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use tokio::time::Instant;

use crate::client_log::SharedLog;
use crate::cluster::Cluster;
use crate::fault::{Fault, FaultMode};
use crate::load::{LoadPlan, OperationFactory, PaymentClient};
use crate::report::{EvidenceSummary, FaultReport, Report, Timeline};

/// `once drill failover …`
#[derive(Debug, Clone, clap::Args)]
pub struct DrillArgs {
    /// The cluster description `once up` wrote.
    #[arg(long)]
    pub cluster: PathBuf,
    /// The region to fail.
    #[arg(long)]
    pub region: String,
    #[arg(long, value_enum, default_value = "kill")]
    pub mode: FaultMode,
    /// How long the load runs, in seconds; the fault comes at a third of it.
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// Logical payments started per second.
    #[arg(long, default_value_t = 20)]
    pub rate: u32,
    /// After the load, fail the region back and wait until its tenants are
    /// served there again.
    #[arg(long)]
    pub failback: bool,
    /// Where the report goes; default `drill-<timestamp>/` next to the
    /// cluster description.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// How long clients keep retrying after the load ends, in seconds; also
    /// how long the final replays may take.
    #[arg(long, default_value_t = 30)]
    pub grace: u64,
    /// How long failback may take before the drill gives up on it, in seconds.
    #[arg(long, default_value_t = 60)]
    pub failback_timeout: u64,
}

/// What a drill found.
#[derive(Debug, Clone, PartialEq)]
pub struct DrillOutcome {
    pub report_dir: PathBuf,
    /// The drill proves what it set out to: every invariant held, the
    /// fault was injected, and with `--failback` every tenant is home
    /// again. The binary exits non-zero when not.
    pub passed: bool,
    /// The report's headline (what [`Self::passed`] is not, if anything).
    pub verdict: String,
    /// Every invariant check passed.
    pub invariants_held: bool,
    /// The fault was actually applied (a missing partition switch means it
    /// was not, and the drill proves nothing about failover).
    pub fault_injected: bool,
    /// The names of the checks that failed.
    pub failed_checks: Vec<String>,
    pub report: Report,
}

impl DrillOutcome {
    /// Whether any invariant broke: the binary exits non-zero when so.
    pub fn invariant_broken(&self) -> bool {
        !self.invariants_held
    }
}

fn default_out_dir(cluster: &Path) -> PathBuf {
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(':', "");
    cluster
        .parent()
        .unwrap_or(Path::new("."))
        .join(format!("drill-{stamp}"))
}

/// Runs the whole drill and writes its report.
pub async fn run(args: DrillArgs) -> anyhow::Result<DrillOutcome> {
    let cluster = Cluster::load(&args.cluster)?;
    let region = cluster.region(&args.region, &args.cluster)?.clone();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| default_out_dir(&args.cluster));
    let affected: Vec<_> = cluster
        .tenants_homed_in(&region.name)
        .into_iter()
        .cloned()
        .collect();
    let duration = Duration::from_secs(args.duration.max(1));
    let mut timeline = Timeline::default();
    timeline.record(format!(
        "drill started: {:?} region {} ({} of {} tenants homed there), {} s at {}/s",
        args.mode,
        region.name,
        affected.len(),
        cluster.tenants.len(),
        duration.as_secs(),
        args.rate
    ));

    let http = cluster
        .http_client()?
        .timeout(Duration::from_secs(10))
        .build()?;
    let log = Arc::new(SharedLog::default());
    let client = PaymentClient::new(&cluster.router.url, log.clone())?;
    let run_id = uuid::Uuid::now_v7().simple().to_string()[..12].to_owned();
    let factory = Arc::new(OperationFactory::new(run_id));
    let plan = LoadPlan {
        tenants: cluster.tenants.clone(),
        rate: args.rate,
        duration,
        grace: Duration::from_secs(args.grace),
        replay_after: (duration / 10).clamp(Duration::from_millis(200), Duration::from_secs(3)),
        resend: None,
    };
    let fault = Fault::plan(args.mode, &cluster, &region, &http);

    let start = Instant::now();
    let load = load::run_load(&plan, &client, &factory);
    let load_started_at = timeline.record("load started");
    // The fault's events go on the timeline (and the terminal) as they
    // happen, not when the load ends, 20 s later in a default drill.
    let shared = std::sync::Mutex::new(timeline);
    let record_now = |at: client_log::EpochMillis, what: String| {
        shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .record_at(at, what);
    };
    let fault_schedule = async {
        // The fault's moment is part of the plan, not a wait for a condition.
        tokio::time::sleep_until(start + duration / 3).await;
        let at = client_log::now_ms();
        let injection = fault.inject().await;
        let error = injection.error.as_ref().map(ToString::to_string);
        record_now(
            at,
            match (injection.injected, &error) {
                (true, None) => format!("fault injected: {}", injection.steps.join("; ")),
                (true, Some(e)) => format!(
                    "fault injected in part: {} (first failure: {e})",
                    injection.steps.join("; ")
                ),
                (false, e) => format!(
                    "fault NOT injected: {}",
                    e.as_deref().unwrap_or("no step applied")
                ),
            },
        );
        let mut report = FaultReport {
            mode: args.mode,
            injected: injection.injected,
            at: injection.injected.then_some(at),
            steps: injection.steps,
            error,
        };
        tokio::time::sleep_until(start + duration).await;
        if report.injected && args.mode == FaultMode::Partition {
            let at = client_log::now_ms();
            match fault.heal().await {
                Ok(steps) => record_now(at, format!("fault healed: {}", steps.join("; "))),
                Err(e) => {
                    record_now(at, format!("healing FAILED: {e}"));
                    report.error = Some(format!("healing: {e}"));
                }
            }
        }
        report
    };
    let ((), fault_report) = tokio::join!(load, fault_schedule);
    let mut timeline = shared
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let load_ended_at = timeline.record("load finished: every operation answered or out of time");

    let failback = if args.failback {
        // A killed region has to come back before its tenants can, even
        // when only some of its processes were killed (the restart starts
        // whichever are gone).
        if args.mode == FaultMode::Kill && fault_report.injected {
            let what = match &cluster.control {
                Some(control) => {
                    let restarted = async {
                        control::Control::new(control)?
                            .restart_region(&region.name)
                            .await
                    };
                    match restarted.await {
                        Ok(answer) => format!("region {} restarted: {answer}", region.name),
                        Err(e) => format!("restarting region {} FAILED: {e:#}", region.name),
                    }
                }
                None => format!(
                    "region {} was killed and the cluster has no control endpoint to restart it",
                    region.name
                ),
            };
            timeline.record(what);
        }
        // Killed or cut off, the routers counted the region down; they must
        // count it up again first, or their next health round would move the
        // tenants away again (a router refuses such a failback with 409).
        if fault_report.injected {
            let endpoints: Vec<String> = cluster
                .regions
                .iter()
                .filter_map(|r| r.store.as_ref().map(|s| s.api_url.clone()))
                .collect();
            let timeout = Duration::from_secs(args.failback_timeout);
            timeline.record(
                match failback::wait_until_healthy(
                    &endpoints,
                    cluster.operator_tls()?,
                    &region.name,
                    timeout,
                )
                .await
                {
                    Ok(()) => format!("region {} healthy again in raft-store", region.name),
                    Err(e) => format!("region {} not seen healthy: {e:#}", region.name),
                },
            );
        }
        timeline.record(format!("failback of {} requested", region.name));
        let result = failback::fail_back(
            cluster.router.admin(),
            cluster.router_admin_token(),
            &region.name,
            &affected,
            &client,
            &factory,
            Duration::from_secs(args.failback_timeout),
        )
        .await;
        match result.home_again_at {
            Some(at) => timeline.record_at(
                at,
                format!(
                    "failback done: every tenant served by {} again",
                    region.name
                ),
            ),
            None => {
                timeline.record(format!(
                    "failback NOT done (router answered {:?}): still away: {}",
                    result.router_status,
                    result.not_home.join(", ")
                ));
            }
        }
        Some(result)
    } else {
        None
    };

    // Where every tenant is now. With --failback the drill ends where it
    // started: tenants of other regions a router moved meanwhile (a region
    // counted down under load) are failed back too; without it the report
    // names those away, R's among them, as asked.
    let homecoming = if args.failback {
        homecoming::bring_home(&cluster, Duration::from_secs(args.failback_timeout)).await
    } else {
        homecoming::survey(&cluster).await
    };
    timeline.record(homecoming.summary());

    // After the fault and the failback: every stored answer once more, from
    // wherever the tenant is served now.
    let replays = final_replay::replay_stored_answers(
        &log.snapshot(),
        &cluster.tenants,
        &client,
        &factory,
        Instant::now() + Duration::from_secs(args.grace),
    )
    .await;
    timeline.record(replays.summary());

    let evidence = gather::gather(&cluster, log.snapshot(), &http).await;
    timeline.record(format!(
        "evidence gathered: {}{}, {} gaps",
        evidence.counts(),
        evidence
            .store_member
            .as_ref()
            .map_or_else(String::new, |m| format!(" (from {m})")),
        evidence.gaps.len()
    ));
    let checks = check::check_all(&evidence);
    let failed_checks: Vec<String> = checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name.clone())
        .collect();
    timeline.record(if failed_checks.is_empty() {
        "checks done: every invariant held".to_owned()
    } else {
        format!("checks done: BROKEN: {}", failed_checks.join(", "))
    });
    let affected_ids: Vec<String> = affected.iter().map(|t| t.id.clone()).collect();
    let report = Report {
        cluster: args.cluster.display().to_string(),
        region: region.name.clone(),
        duration_seconds: duration.as_secs(),
        rate: args.rate,
        load_started_at: Some(load_started_at),
        measurements: measure::measure(
            &evidence.log,
            fault_report.at,
            &affected_ids,
            load_ended_at,
        ),
        timeline,
        fault: fault_report,
        failback,
        evidence: EvidenceSummary::of(&evidence),
        invariants_held: failed_checks.is_empty(),
        checks,
        homecoming,
        verdict: String::new(),
        passed: false,
    }
    .with_verdict();
    files::write(&report, &out, &evidence).context("writing the drill report")?;
    Ok(DrillOutcome {
        report_dir: out,
        passed: report.passed,
        verdict: report.verdict.clone(),
        invariants_held: report.invariants_held,
        fault_injected: report.fault.injected,
        failed_checks,
        report,
    })
}
