//! A load client for `once`: every request carries its own
//! `Idempotency-Key` (or, in replay mode, a key that already completed), and
//! latencies go into an HDR histogram.
//!
//! Requests go through `once-client`, the same client the API's users get,
//! with its retries off by default (`--max-attempts 1`): one request is one
//! HTTP attempt, so latencies and statuses measure the server, not a retry
//! policy. With `--max-attempts N` a request is a logical call with up to N
//! attempts under one key; its latency covers all of them (backoff
//! included), its status is the final one, and `attempts` in the report
//! counts every HTTP attempt of the measured requests.
//!
//! The API key comes from `ONCE_BENCH_API_KEY` only: there is no
//! `--api-key`, whose value every user of the machine would see in `ps`.
//!
//! Two models:
//! - closed (default): `concurrency` workers send back to back — the
//!   throughput ceiling;
//! - open (`--rate R`): requests are scheduled at a fixed rate and latency
//!   is measured from each request's *intended* start, so a stalled server
//!   shows up in the percentiles instead of hiding (coordinated omission).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use once_client::{Client, CreatePayment, CreatePaymentErrorKind, IdempotencyKey};
use serde::Serialize;

/// What a request may take, every attempt included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A new payment per request: unique key and merchant reference.
    New,
    /// Replays: each worker repeats one request that already completed.
    Replay,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Base URL of a node or router.
    #[arg(long)]
    pub url: String,
    /// The tenant's API key: from `ONCE_BENCH_API_KEY` only (see
    /// [`API_KEY_ENV`]), never a flag.
    #[arg(skip)]
    pub api_key: String,
    #[arg(long, value_enum, default_value_t = Mode::New)]
    pub mode: Mode,
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Measured seconds (after warm-up).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Open model: total requests per second across workers.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Free-form label copied into the JSON report.
    #[arg(long, default_value = "")]
    pub label: String,
    /// HTTP attempts per request: 1 (default) measures single attempts;
    /// more lets once-client retry under the same key.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: u32,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub label: String,
    pub mode: Mode,
    pub concurrency: usize,
    pub rate: Option<f64>,
    pub seconds: f64,
    pub requests: u64,
    /// HTTP attempts of the measured requests (= `requests` when
    /// `max_attempts` is 1).
    pub attempts: u64,
    pub throughput: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub statuses: BTreeMap<String, u64>,
}

struct Worker {
    client: Client,
    mode: Mode,
    id: usize,
}

/// What one request ended with: its report label (`201`, `503`, …,
/// `timeout`, `error`) and how many HTTP attempts it took.
struct Sent {
    status: String,
    attempts: u32,
}

impl Worker {
    /// One request; `seq` makes keys and references unique in `new` mode.
    async fn send(&self, run: &str, seq: u64) -> Sent {
        let (key, reference) = match self.mode {
            Mode::New => (
                format!("bench-{run}-{}-{seq}", self.id),
                format!("ref-{run}-{}-{seq}", self.id),
            ),
            Mode::Replay => (
                format!("bench-{run}-replay-{}", self.id),
                format!("ref-{run}-replay-{}", self.id),
            ),
        };
        let key = IdempotencyKey::parse(key.as_bytes()).expect("bench keys are printable ASCII");
        let payment =
            CreatePayment::new(format!("acc_bench_{}", self.id), "10.00", "EUR", reference)
                .idempotency_key(key);
        match self.client.create_payment(payment).await {
            Ok(created) => Sent {
                status: "201".into(),
                attempts: created.attempts,
            },
            Err(error) => Sent {
                status: match (&error.status, &error.kind) {
                    (Some(status), _) => status.to_string(),
                    (None, CreatePaymentErrorKind::Indeterminate { last_error, .. })
                        if last_error.is_timeout() =>
                    {
                        "timeout".into()
                    }
                    (None, _) => "error".into(),
                },
                attempts: error.attempts,
            },
        }
    }
}

/// Where `once bench` reads the API key it sends: the environment only,
/// since a command line shows in `ps` to every user of the machine.
pub const API_KEY_ENV: &str = "ONCE_BENCH_API_KEY";

pub async fn run(mut args: BenchArgs) -> anyhow::Result<()> {
    args.api_key = std::env::var(API_KEY_ENV)
        .ok()
        .filter(|k| !k.trim().is_empty())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "set {API_KEY_ENV} to the tenant's API key (the environment only: a command line shows in `ps`)"
            )
        })?;
    let report = bench(&args).await?;
    eprintln!(
        "{:<28} {:>8} {:>4} clients: {:>9.0} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms  statuses {:?}",
        report.label,
        format!("{:?}", report.mode).to_lowercase(),
        report.concurrency,
        report.throughput,
        report.p50_ms,
        report.p99_ms,
        report.statuses
    );
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

pub async fn bench(args: &BenchArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(args.concurrency > 0, "concurrency must be positive");
    // The 30 s the bench always gave a request is the client's deadline and
    // attempt timeout; it retries only when asked to.
    let client = Client::builder(&args.url, &args.api_key)
        .user_agent(concat!("once-bench/", env!("CARGO_PKG_VERSION")))
        .deadline(REQUEST_TIMEOUT)
        .attempt_timeout(REQUEST_TIMEOUT)
        .max_attempts(args.max_attempts)
        .build()?;
    let run_id = uuid::Uuid::now_v7().simple().to_string();
    let workers: Vec<Arc<Worker>> = (0..args.concurrency)
        .map(|id| {
            Arc::new(Worker {
                client: client.clone(),
                mode: args.mode,
                id,
            })
        })
        .collect();
    if args.mode == Mode::Replay {
        for w in &workers {
            let seeded = w.send(&run_id, 0).await;
            anyhow::ensure!(
                seeded.status == "201",
                "creating the payment to replay got {}",
                seeded.status
            );
        }
    }

    let warmup = Duration::from_secs_f64(args.warmup);
    let measured = Duration::from_secs_f64(args.duration);
    let start = Instant::now() + Duration::from_millis(10);
    // Each worker's requests are spaced `interval` apart in the open model.
    let interval = args
        .rate
        .map(|r| Duration::from_secs_f64(args.concurrency as f64 / r));
    let concurrency = args.concurrency;
    let mut tasks = Vec::new();
    for worker in workers {
        let run_id = run_id.clone();
        tasks.push(tokio::spawn(async move {
            let mut histogram =
                Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
            let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
            let mut attempts = 0u64;
            // Stagger open-model workers across one interval.
            let offset = interval.map_or(Duration::ZERO, |i| {
                i.mul_f64(worker.id as f64 / concurrency as f64)
            });
            let mut seq = 1u64;
            let mut intended = start + offset;
            loop {
                if let Some(i) = interval {
                    tokio::time::sleep_until(intended.into()).await;
                    intended += i;
                }
                let began = if interval.is_some() {
                    intended - interval.unwrap_or_default()
                } else {
                    Instant::now()
                };
                if began >= start + warmup + measured {
                    break;
                }
                let sent = worker.send(&run_id, seq).await;
                seq += 1;
                if began < start + warmup {
                    continue;
                }
                attempts += u64::from(sent.attempts);
                *statuses.entry(sent.status).or_default() += 1;
                let micros = u64::try_from(began.elapsed().as_micros())
                    .unwrap_or(u64::MAX)
                    .max(1);
                histogram.saturating_record(micros);
            }
            (histogram, statuses, attempts)
        }));
    }
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut statuses = BTreeMap::new();
    let mut attempts = 0;
    for task in tasks {
        let (h, s, a) = task.await?;
        histogram.add(&h)?;
        attempts += a;
        for (k, v) in s {
            *statuses.entry(k).or_default() += v;
        }
    }
    let seconds = measured.as_secs_f64();
    Ok(Report {
        label: args.label.clone(),
        mode: args.mode,
        concurrency: args.concurrency,
        rate: args.rate,
        seconds,
        requests: histogram.len(),
        attempts,
        throughput: histogram.len() as f64 / seconds,
        p50_ms: histogram.value_at_quantile(0.50) as f64 / 1000.0,
        p99_ms: histogram.value_at_quantile(0.99) as f64 / 1000.0,
        max_ms: histogram.max() as f64 / 1000.0,
        statuses,
    })
}
