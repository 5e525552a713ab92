//! `once store bench`: a closed-loop claim benchmark against a running
//! raft-store cluster, through the same `StoreClient` the node uses.
//! `concurrency` callers share one client and claim fresh keys (each with a
//! fresh business key) as fast as the cluster answers; reports throughput
//! and latency. Closed loop: latency under overload is understated
//! (coordinated omission), so read the throughput, and the latency at low
//! concurrency. [`etcd_claims`] runs the same loop against etcd for
//! comparison (`bench/raft-store.sh`).
//!
//! [`wan_claims`] is the latency figure under a simulated WAN
//! (`once_raft_store::wan`): members started with `--wan-latency`, one
//! client in one member's region paying the same round trip to the others,
//! claiming one key at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use once_store_client::admin::{self, AdminError};
use once_store_client::client::{ClientOptions, StoreClient};
use once_store_client::command::{BusinessKey, NewClaim, Reply, Scope, Step};

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("building the client")]
    Client(#[from] reqwest::Error),
    #[error("asking the members who leads")]
    Admin(#[from] AdminError),
    #[error("no member is a {0}")]
    NoSuchMember(&'static str),
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub concurrency: usize,
    pub requests: usize,
    pub claimed: usize,
    pub errors: usize,
    pub seconds: f64,
    pub claims_per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Only in a simulated-WAN run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wan: Option<WanFigures>,
}

/// The latency of a simulated-WAN run in round trips.
#[derive(Debug, Clone, Serialize)]
pub struct WanFigures {
    pub rtt_ms: f64,
    /// The client's own (first, no latency) endpoint, and whether it led.
    pub local_endpoint: String,
    pub local_is_leader: bool,
    /// Claims before the measured ones (finding the leader), not counted.
    pub warmup: usize,
    pub p50_rtts: f64,
    pub p99_rtts: f64,
}

/// Which member the client of [`wan_claims`] sits beside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LocalMember {
    /// The first endpoint, whatever its role.
    First,
    /// The leader: a claim pays the leader's replication round trip only.
    Leader,
    /// A follower: a claim also crosses the WAN to reach the leader.
    Follower,
}

impl std::str::FromStr for LocalMember {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "first" => Ok(Self::First),
            "leader" => Ok(Self::Leader),
            "follower" => Ok(Self::Follower),
            other => Err(format!("{other:?} is not first, leader or follower")),
        }
    }
}

fn fresh_claim(run: u64, n: usize) -> NewClaim {
    let key = format!("bench-{run:x}-{n}");
    NewClaim {
        payload: None,
        scope: Scope {
            tenant: "bench".into(),
            principal: "bench".into(),
            operation: "payments.create".into(),
            key: key.clone(),
        },
        fingerprint_version: 1,
        fingerprint: "0".repeat(64),
        business_key: Some(BusinessKey {
            tenant: "bench".into(),
            account_id: "acc_bench".into(),
            merchant_reference: key.clone(),
        }),
        payment_id: Some(format!("pay_{key}")),
        provider_key: Some(format!("provider_payment_pay_{key}")),
        step: Step::LocalPaymentCreated,
        trace_id: None,
        region: "bench".into(),
        epoch: 0,
        lease_ms: 10_000,
    }
}

pub async fn claims(
    endpoints: &[String],
    concurrency: usize,
    requests: usize,
    tls: Option<once_tls::Tls>,
) -> Result<BenchReport, reqwest::Error> {
    let options = ClientOptions {
        tls,
        ..ClientOptions::default()
    };
    let client = StoreClient::new(endpoints, options)?;
    Ok(claims_through(Arc::new(client), rand::random(), concurrency, requests).await)
}

/// One client beside one member, `rtt` from the others (members started
/// with `--wan-latency` of the same value), claiming one fresh key at a
/// time: the claim latency a caller sees across regions.
///
/// Where the round trips go: the leader's append to the followers, answered
/// by the first of them (a quorum of two), is one; reaching a remote leader
/// is one more (the client remembers the leader after a redirect). openraft
/// 0.9 keeps one append in flight per follower and, after each commit,
/// sends one to carry the new commit index: a sequential caller beside the
/// leader finds that notice in flight and waits one more round trip for
/// it, so it pays ~2 as well (see `BENCHMARKS.md`); a heartbeat in flight
/// adds up to one more at the tail.
pub async fn wan_claims(
    endpoints: &[String],
    requests: usize,
    rtt: Duration,
    local: LocalMember,
    tls: Option<once_tls::Tls>,
) -> Result<BenchReport, BenchError> {
    let mut ordered = endpoints.to_vec();
    let leader = admin::Operator::with_tls(None, tls.as_ref())
        .leader_endpoint(endpoints)
        .await?;
    let local_index = match local {
        LocalMember::First => 0,
        LocalMember::Leader => ordered.iter().position(|e| *e == leader).unwrap_or(0),
        LocalMember::Follower => ordered
            .iter()
            .position(|e| *e != leader)
            .ok_or(BenchError::NoSuchMember("follower"))?,
    };
    ordered.swap(0, local_index);
    let options = ClientOptions {
        wan_latency: rtt,
        local_endpoints: 1,
        tls,
        ..ClientOptions::default()
    };
    let client = Arc::new(StoreClient::new(&ordered, options)?);
    let run: u64 = rand::random();
    // The first claims find the leader (a redirect and a status round);
    // a long-lived client has done that long before.
    let warmup = 5;
    for n in 0..warmup {
        let _ = client.claim(fresh_claim(run, requests + n)).await;
    }
    let mut report = claims_through(client, run, 1, requests).await;
    let ms = rtt.as_secs_f64() * 1000.0;
    report.wan = Some(WanFigures {
        rtt_ms: ms,
        local_is_leader: ordered[0] == leader,
        local_endpoint: ordered.swap_remove(0),
        warmup,
        p50_rtts: if ms > 0.0 { report.p50_ms / ms } else { 0.0 },
        p99_rtts: if ms > 0.0 { report.p99_ms / ms } else { 0.0 },
    });
    Ok(report)
}

/// `concurrency` callers claim keys `0..requests` of run `run` through one
/// shared client.
async fn claims_through(
    client: Arc<StoreClient>,
    run: u64,
    concurrency: usize,
    requests: usize,
) -> BenchReport {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, next) = (client.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let (mut claimed, mut errors) = (0, 0);
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= requests {
                    return (latencies, claimed, errors);
                }
                let t = Instant::now();
                match client.claim(fresh_claim(run, n)).await {
                    Ok(Reply::Claimed(_)) => claimed += 1,
                    _ => errors += 1,
                }
                latencies.push(t.elapsed());
            }
        }));
    }
    let mut latencies: Vec<Duration> = Vec::with_capacity(requests);
    let (mut claimed, mut errors) = (0, 0);
    for task in tasks {
        if let Ok((l, c, e)) = task.await {
            latencies.extend(l);
            claimed += c;
            errors += e;
        }
    }
    report(concurrency, requests, claimed, errors, started, latencies)
}

/// The same closed loop against etcd (3.4's JSON gateway), for comparison:
/// one `txn` that puts the scoped key and the business key only if neither
/// exists (`create_revision == 0`), the create-if-absent a claim is. The
/// value is a record-sized blob. etcd fsyncs its WAL per batch, like
/// raft-store.
pub async fn etcd_claims(
    endpoint: &str,
    concurrency: usize,
    requests: usize,
    tls: Option<once_tls::Tls>,
) -> Result<BenchReport, reqwest::Error> {
    use base64::Engine;
    let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
    // With an identity, etcd is spoken to over mutual TLS, as raft-store is.
    let http = match &tls {
        Some(tls) => tls.http_client(),
        None => reqwest::Client::builder(),
    }
    .tcp_nodelay(true)
    .build()?;
    let url = format!("{}/v3/kv/txn", endpoint.trim_end_matches('/'));
    let run: u64 = rand::random();
    let value = b64(&[b'r'; 300]);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (http, url, next, value) = (http.clone(), url.clone(), next.clone(), value.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let (mut claimed, mut errors) = (0, 0);
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= requests {
                    return (latencies, claimed, errors);
                }
                let scoped = b64(format!("records/bench/bench/payments.create/bench-{run:x}-{n}").as_bytes());
                let business = b64(format!("business/bench/acc_bench/bench-{run:x}-{n}").as_bytes());
                let txn = serde_json::json!({
                    "compare": [
                        {"key": scoped, "result": "EQUAL", "target": "CREATE", "create_revision": "0"},
                        {"key": business, "result": "EQUAL", "target": "CREATE", "create_revision": "0"},
                    ],
                    "success": [
                        {"request_put": {"key": scoped, "value": value}},
                        {"request_put": {"key": business, "value": b64(b"pay")}},
                    ],
                });
                let t = Instant::now();
                let ok = match http.post(&url).json(&txn).send().await {
                    Ok(r) => r
                        .json::<serde_json::Value>()
                        .await
                        .is_ok_and(|v| v["succeeded"] == serde_json::Value::Bool(true)),
                    Err(_) => false,
                };
                latencies.push(t.elapsed());
                if ok {
                    claimed += 1;
                } else {
                    errors += 1;
                }
            }
        }));
    }
    let mut latencies: Vec<Duration> = Vec::with_capacity(requests);
    let (mut claimed, mut errors) = (0, 0);
    for task in tasks {
        if let Ok((l, c, e)) = task.await {
            latencies.extend(l);
            claimed += c;
            errors += e;
        }
    }
    Ok(report(
        concurrency,
        requests,
        claimed,
        errors,
        started,
        latencies,
    ))
}

fn report(
    concurrency: usize,
    requests: usize,
    claimed: usize,
    errors: usize,
    started: Instant,
    mut latencies: Vec<Duration>,
) -> BenchReport {
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    BenchReport {
        concurrency,
        requests,
        claimed,
        errors,
        seconds,
        claims_per_second: latencies.len() as f64 / seconds,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: at(1.0),
        wan: None,
    }
}
