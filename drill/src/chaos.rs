//! `once drill chaos`: retrying clients under a random, seeded schedule of
//! mixed faults, then every invariant of the failover drill plus
//! linearizability of the history the clients saw (DESIGN §3, §6).
//!
//! ```text
//!   load (same mix as the failover drill) ──► router ──► nodes ──► store
//!     + resends of remembered payments (same body / other body) through
//!       another region's node (`--resend-share`, crate::resend)
//!     │ client log: every attempt, invoked/answered/indeterminate
//!   nemesis loop (seed): quiet ─► apply fault ─► seen? ─► hold ─► heal ─► healthy?
//!     kill · pause · partition · skew · restart · membership · leader
//!   after the load: every tenant failed back home, then final replays of
//!   every stored answer
//!    ▼
//!   gather (as the failover drill) ─► check_all + linearizability
//!    ▼
//!   report.json / report.md / report.html / *.svg / evidence.json
//! ```
//!
//! One fault at a time, each healed and the cluster healthy again before
//! the next: mixed and repeated, never two store members down at once (no
//! deployment is expected to survive losing its majority). The seed is
//! printed and in the report, with the command that repeats the schedule.
//!
//! # Layout
//!
//! - [`nemesis`]: the nemeses, the faults as drawn, the seeded schedule.
//! - [`processes`]: signals and what the kernel and `Date` headers show.
//! - [`partitions`]: partition shapes as switches, and probes of the cut.
//! - [`context`]: finding targets (fresh `cluster.json`, store leader).
//! - [`inject`]: applying and healing each fault, seeing both.
//! - [`health`]: when the cluster is healthy again.
//! - [`record`]: one fault's done/seen record.
//! - [`preflight`]: what the chosen nemeses need from the machine, checked
//!   before anything runs (libfaketime for `skew`).
//! - [`report`]: the report and its files, and the verdict: invariants, faults
//!   that did not take effect, tenants left away.

pub mod context;
pub mod health;
pub mod inject;
pub mod nemesis;
pub mod partitions;
pub mod preflight;
pub mod processes;
pub mod record;
pub mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use tokio::time::Instant;

use crate::chaos::context::Ctx;
use crate::chaos::nemesis::{Nemesis, Schedule};
use crate::chaos::record::FaultRecord;
use crate::chaos::report::ChaosReport;
use crate::client_log::{SharedLog, now_ms};
use crate::cluster::Cluster;
use crate::load::{LoadPlan, OperationFactory, PaymentClient, Resends};
use crate::report::{EvidenceSummary, Timeline};
use crate::resend::Resender;
use crate::{check, final_replay, gather, homecoming, idempotence, linearizability};

/// `once drill chaos …`
#[derive(Debug, Clone, clap::Args)]
pub struct ChaosArgs {
    /// The cluster description `once up` wrote.
    #[arg(long)]
    pub cluster: PathBuf,
    /// How long the load and the faults run, in seconds.
    #[arg(long, default_value_t = 120)]
    pub duration: u64,
    /// The nemeses to draw faults from (default: all of them). `skew` needs
    /// libfaketime (Debian's `faketime` package, or `ONCE_LIBFAKETIME`):
    /// without it the run is refused before it starts.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Nemesis::ALL)]
    pub nemesis: Vec<Nemesis>,
    /// The schedule's seed (default: a random one, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Logical payments started per second.
    #[arg(long, default_value_t = 20)]
    pub rate: u32,
    /// The nodes' lease: pauses outlast it.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub lease: Duration,
    /// How long clients keep retrying after the load ends, in seconds; also
    /// how long the final replays may take.
    #[arg(long, default_value_t = 60)]
    pub grace: u64,
    /// How long the cluster may take to be healthy after a fault, in seconds.
    #[arg(long, default_value_t = 90)]
    pub recovery_limit: u64,
    /// The idempotence workload: the share of the load's ticks that re-send
    /// a remembered payment instead of starting one — half with the same
    /// key and bytes, half with the same key and another body — first
    /// through another region's node (0 turns it off).
    #[arg(long, default_value_t = 0.2)]
    pub resend_share: f64,
    /// How many of the newest payments the clients remember for resends.
    #[arg(long, default_value_t = 1000)]
    pub resend_memory: usize,
    /// Where the report goes; default `chaos-<timestamp>/` next to the
    /// cluster description.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// What a chaos run found.
#[derive(Debug, Clone)]
pub struct ChaosOutcome {
    pub report_dir: PathBuf,
    pub report: ChaosReport,
}

fn default_out_dir(cluster: &std::path::Path) -> PathBuf {
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(':', "");
    cluster
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join(format!("chaos-{stamp}"))
}

/// The command line that repeats this run's schedule.
fn command(args: &ChaosArgs, seed: u64) -> String {
    let nemeses: Vec<&str> = args.nemesis.iter().map(|n| n.name()).collect();
    format!(
        "once drill chaos --cluster {} --duration {} --nemesis {} --seed {seed} --rate {} --resend-share {}",
        args.cluster.display(),
        args.duration,
        nemeses.join(","),
        args.rate,
        args.resend_share
    )
}

/// How long the run may take to bring every tenant home at its end.
const HOMECOMING_LIMIT: Duration = Duration::from_secs(60);

/// Runs the chaos drill and writes its report.
pub async fn run(args: ChaosArgs) -> anyhow::Result<ChaosOutcome> {
    // Before anything is read, sent or struck: a nemesis this machine
    // cannot bring would only be refused fault after fault.
    preflight::check(&args.nemesis)?;
    let cluster = Cluster::load(&args.cluster)?;
    let regions: Vec<String> = cluster
        .regions
        .iter()
        .filter(|r| r.store.is_some())
        .map(|r| r.name.clone())
        .collect();
    anyhow::ensure!(
        regions.len() >= 3 && regions.len() == cluster.regions.len(),
        "chaos needs at least three regions, each with a store member (this cluster has {} regions, {} with a member)",
        cluster.regions.len(),
        regions.len()
    );
    let ctx = Ctx::new(args.cluster.clone(), &cluster)?;
    let seed = args.seed.unwrap_or_else(rand::random);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| default_out_dir(&args.cluster));
    eprintln!("chaos seed {seed} (repeat: {})", command(&args, seed));
    let duration = Duration::from_secs(args.duration.max(1));
    let recovery_limit = Duration::from_secs(args.recovery_limit);
    let mut timeline = Timeline::default();
    let names: Vec<&str> = args.nemesis.iter().map(|n| n.name()).collect();
    timeline.record(format!(
        "chaos started: seed {seed}, {} s at {}/s, nemeses {}",
        duration.as_secs(),
        args.rate,
        names.join(",")
    ));
    // Healthy before the first fault, or the run would blame the nemeses
    // for an outage already there.
    if let Err(e) = health::wait_healthy(&ctx, recovery_limit).await {
        anyhow::bail!("the cluster is not healthy before any fault: {e}");
    }

    let log = Arc::new(SharedLog::default());
    let client = PaymentClient::new(&cluster.router.url, log.clone())?;
    let run_id = uuid::Uuid::now_v7().simple().to_string()[..12].to_owned();
    let factory = Arc::new(OperationFactory::new(run_id));
    let plan = LoadPlan {
        tenants: cluster.tenants.clone(),
        rate: args.rate,
        // Each operation retries for as long as a fault may take to heal,
        // plus the grace (`run_load_until`): long enough to outlast any
        // fault the cluster recovers from, short enough that a cluster that
        // does not recover ends the run.
        duration: recovery_limit,
        grace: Duration::from_secs(args.grace),
        replay_after: Duration::from_secs(2),
        // Drawn from the schedule's seed too, so a repeated command
        // resends the same share the same way.
        resend: (args.resend_share > 0.0)
            .then(|| {
                Resender::new(&cluster, &log, args.resend_share, args.resend_memory, seed)
                    .map(|r| Arc::new(r) as Arc<dyn Resends>)
            })
            .transpose()?,
    };
    let mut schedule = Schedule::new(seed, &args.nemesis, &regions, args.lease);

    let load_started_at = timeline.record("load started");
    let end = Instant::now() + duration;
    let round = schedule.round_len();
    let (stop_load, load_stopped) = tokio::sync::oneshot::channel::<()>();
    let load = crate::load::run_load_until(&plan, &client, &factory, async {
        let _ = load_stopped.await;
    });
    let nemeses = async {
        let mut faults: Vec<FaultRecord> = Vec::new();
        for step in schedule.by_ref() {
            // The quiet spell and the hold are the drawn schedule, not
            // waits for a condition. The first round always completes, so
            // a short run still brings every nemesis once.
            let begin = Instant::now() + Duration::from_millis(step.quiet_ms);
            if begin >= end && faults.len() >= round {
                break;
            }
            tokio::time::sleep_until(begin).await;
            let mut record = FaultRecord::begin(&step.fault);
            let applied = inject::apply(&ctx, &step.fault, &mut record).await;
            tokio::time::sleep(Duration::from_millis(step.hold_ms)).await;
            inject::heal(&ctx, &step.fault, applied, &mut record).await;
            match health::wait_healthy(&ctx, recovery_limit).await {
                Ok(_) => record.recovered_at = Some(now_ms()),
                Err(e) => record.failed(format!("after healing: {e}")),
            }
            faults.push(record);
        }
        tokio::time::sleep_until(end).await;
        let _ = stop_load.send(());
        faults
    };
    let ((), faults) = tokio::join!(load, nemeses);
    let load_ended_at = timeline.record("load finished: every operation answered or out of time");
    for fault in &faults {
        timeline.record_at(
            fault.started_at,
            format!(
                "{}: {}{}",
                fault.nemesis.name(),
                fault.description,
                if fault.took_effect {
                    ""
                } else {
                    " (not seen taking effect)"
                }
            ),
        );
    }

    // Back where it started: the tenants the faults moved away go home
    // before the final replays, which then land where the tenants live.
    let homecoming = homecoming::bring_home(&ctx.cluster()?, HOMECOMING_LIMIT).await;
    timeline.record(homecoming.summary());

    let replays = final_replay::replay_stored_answers(
        &log.snapshot(),
        &cluster.tenants,
        &client,
        &factory,
        Instant::now() + Duration::from_secs(args.grace),
    )
    .await;
    timeline.record(replays.summary());

    // Pids changed with the restarts: the evidence is read from the
    // cluster as it is now.
    let cluster = ctx.cluster()?;
    let http = cluster
        .http_client()?
        .timeout(Duration::from_secs(30))
        .build()?;
    let evidence = gather::gather(&cluster, log.snapshot(), &http).await;
    timeline.record(format!(
        "evidence gathered: {}, {} gaps",
        evidence.counts(),
        evidence.gaps.len()
    ));
    let linearizability = linearizability::check(&evidence.log);
    let checks = check::check_all_with(&evidence, &linearizability);
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name.as_str())
        .collect();
    timeline.record(if failed.is_empty() {
        "checks done: every invariant held, the history is linearizable".to_owned()
    } else {
        format!("checks done: BROKEN: {}", failed.join(", "))
    });
    let report = ChaosReport {
        cluster: args.cluster.display().to_string(),
        seed,
        nemeses: args.nemesis.clone(),
        duration_seconds: duration.as_secs(),
        rate: args.rate,
        command: command(&args, seed),
        load_started_at,
        load_ended_at,
        timeline,
        by_nemesis: ChaosReport::count(&faults),
        faults,
        operations: evidence.log.operations.len(),
        attempts: evidence.log.attempts.len(),
        answers: ChaosReport::answers(&evidence.log),
        invariants_held: failed.is_empty(),
        homecoming,
        linearizability,
        resends: idempotence::check(&evidence).1,
        evidence: EvidenceSummary::of(&evidence),
        checks,
        verdict: String::new(),
        passed: false,
    }
    .with_verdict();
    report
        .write(&out, &evidence)
        .context("writing the chaos report")?;
    Ok(ChaosOutcome {
        report_dir: out,
        report,
    })
}
