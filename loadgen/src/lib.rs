//! A load client for `once`: every request carries its own
//! `Idempotency-Key` (or, in replay mode, a key that already completed), and
//! latencies go into an HDR histogram.
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

use anyhow::Context;
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use serde::Serialize;

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
    #[arg(long, env = "ONCE_BENCH_API_KEY")]
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
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub label: String,
    pub mode: Mode,
    pub concurrency: usize,
    pub rate: Option<f64>,
    pub seconds: f64,
    pub requests: u64,
    pub throughput: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub statuses: BTreeMap<String, u64>,
}

struct Worker {
    client: reqwest::Client,
    url: String,
    auth: String,
    mode: Mode,
    id: usize,
}

impl Worker {
    /// One request; `seq` makes keys and references unique in `new` mode.
    async fn send(&self, run: &str, seq: u64) -> Result<u16, reqwest::Error> {
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
        let body = format!(
            r#"{{"accountId":"acc_bench_{}","amount":"10.00","currency":"EUR","merchantReference":"{reference}"}}"#,
            self.id
        );
        let response = self
            .client
            .post(&self.url)
            .header("authorization", &self.auth)
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let status = response.status().as_u16();
        response.bytes().await?;
        Ok(status)
    }
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
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
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(30))
        .build()?;
    let run_id = uuid::Uuid::now_v7().simple().to_string();
    let url = format!("{}/payments", args.url.trim_end_matches('/'));
    let workers: Vec<Arc<Worker>> = (0..args.concurrency)
        .map(|id| {
            Arc::new(Worker {
                client: client.clone(),
                url: url.clone(),
                auth: format!("Bearer {}", args.api_key),
                mode: args.mode,
                id,
            })
        })
        .collect();
    if args.mode == Mode::Replay {
        for w in &workers {
            let status = w
                .send(&run_id, 0)
                .await
                .context("creating the payment to replay")?;
            anyhow::ensure!(status == 201, "seeding a replay got HTTP {status}");
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
                let result = worker.send(&run_id, seq).await;
                seq += 1;
                if began < start + warmup {
                    continue;
                }
                let key = match result {
                    Ok(status) => status.to_string(),
                    Err(e) if e.is_timeout() => "timeout".into(),
                    Err(_) => "error".into(),
                };
                *statuses.entry(key).or_default() += 1;
                let micros = u64::try_from(began.elapsed().as_micros())
                    .unwrap_or(u64::MAX)
                    .max(1);
                histogram.saturating_record(micros);
            }
            (histogram, statuses)
        }));
    }
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut statuses = BTreeMap::new();
    for task in tasks {
        let (h, s) = task.await?;
        histogram.add(&h)?;
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
        throughput: histogram.len() as f64 / seconds,
        p50_ms: histogram.value_at_quantile(0.50) as f64 / 1000.0,
        p99_ms: histogram.value_at_quantile(0.99) as f64 / 1000.0,
        max_ms: histogram.max() as f64 / 1000.0,
        statuses,
    })
}
