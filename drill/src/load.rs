//! Load through the router: paced logical payments spread over every tenant,
//! each sent by a retrying client until it has a final answer, plus the
//! traffic whose correct answer the checker knows in advance — replays of
//! acknowledged keys, a key reused with a different body, and duplicates of
//! one merchant reference sent under different keys.
//!
//! ```text
//! pacer (tokio interval, --rate/s, --duration) ──► one task per logical payment
//!     task: send(op) ──retry same key+bytes on no answer/5xx/421/409 in progress/202──► final answer
//!           └─ first 201 ─► (later) replay with the same key+bytes ─► (every 10th) same key, other body
//!     every 20th tick: a group of 3 duplicates (same accountId+merchantReference, own keys)
//! ```
//!
//! Every attempt lands in the [`SharedLog`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client_log::{Attempt, Intent, Operation, SharedLog, body_hash, now_ms};
use crate::cluster::Tenant;

/// Size of a group of duplicates sent under different keys.
const DUPLICATES_PER_GROUP: usize = 3;
/// Every how many ticks a duplicate group replaces a plain payment.
const DUPLICATE_GROUP_EVERY: u64 = 20;
/// Every how many acknowledged payments also get a reused-key request.
const MISMATCH_EVERY: u64 = 10;

/// Makes operations with unique keys, references and bodies for one run.
#[derive(Debug)]
pub struct OperationFactory {
    run_id: String,
    next_id: AtomicU64,
}

impl OperationFactory {
    /// `run_id` makes keys and merchant references unique across drills
    /// against the same cluster.
    pub fn new(run_id: impl Into<String>) -> Self {
        Self {
            run_id: run_id.into(),
            next_id: AtomicU64::new(1),
        }
    }

    fn next(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A new payment under a fresh key and reference.
    pub fn payment(&self, tenant: &str) -> Operation {
        let id = self.next();
        let reference = format!("drill-{}-{id}", self.run_id);
        self.build(
            id,
            Intent::Payment,
            tenant,
            reference.clone(),
            reference,
            1000 + id % 9000,
        )
    }

    /// `original` once more: same key, byte-identical body.
    pub fn replay(&self, original: &Operation) -> Operation {
        Operation {
            id: self.next(),
            intent: Intent::Replay { of: original.id },
            ..original.clone()
        }
    }

    /// `original`'s key with a different amount.
    pub fn mismatched(&self, original: &Operation) -> Operation {
        let id = self.next();
        let amount: u64 = serde_json::from_str::<serde_json::Value>(&original.body)
            .ok()
            .and_then(|b| b["amount"].as_str().map(parse_minor))
            .unwrap_or(1000);
        self.build(
            id,
            Intent::MismatchedBody { of: original.id },
            &original.tenant,
            original.key.clone(),
            original.merchant_reference.clone(),
            amount + 1,
        )
    }

    /// `n` operations with one merchant reference, each under its own key.
    pub fn duplicates(&self, tenant: &str, n: usize) -> Vec<Operation> {
        let group = self.next();
        let reference = format!("drill-{}-dup-{group}", self.run_id);
        (0..n)
            .map(|_| {
                let id = self.next();
                self.build(
                    id,
                    Intent::KeylessDuplicate { group },
                    tenant,
                    format!("drill-{}-{id}", self.run_id),
                    reference.clone(),
                    2500,
                )
            })
            .collect()
    }

    fn build(
        &self,
        id: u64,
        intent: Intent,
        tenant: &str,
        key: String,
        merchant_reference: String,
        amount_minor: u64,
    ) -> Operation {
        let account_id = account_of(tenant);
        // serde_json writes object keys sorted, so equal commands are equal
        // bytes; the string is kept and every attempt sends exactly it.
        let body = json!({
            "accountId": account_id,
            "amount": format!("{}.{:02}", amount_minor / 100, amount_minor % 100),
            "currency": "EUR",
            "merchantReference": merchant_reference,
        })
        .to_string();
        Operation {
            id,
            intent,
            tenant: tenant.to_owned(),
            key,
            account_id,
            merchant_reference,
            body_sha256: body_hash(body.as_bytes()),
            body,
        }
    }
}

fn parse_minor(amount: &str) -> u64 {
    let (units, cents) = amount.split_once('.').unwrap_or((amount, "0"));
    units.parse::<u64>().unwrap_or(10) * 100 + cents.parse::<u64>().unwrap_or(0)
}

/// The drill's account of a tenant: `[A-Za-z0-9_-]{1,64}` per docs/api.md,
/// never starting with the simulator's always-declined prefix.
pub fn account_of(tenant: &str) -> String {
    let clean: String = tenant
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(50)
        .collect();
    format!("acc_drill_{clean}")
}

/// Sends operations through the router and logs every attempt.
#[derive(Debug, Clone)]
pub struct PaymentClient {
    http: reqwest::Client,
    router_url: String,
    log: Arc<SharedLog>,
    /// Longest wait a `Retry-After` may impose.
    retry_after_cap: Duration,
}

impl PaymentClient {
    pub fn new(router_url: &str, log: Arc<SharedLog>) -> reqwest::Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(1))
                .timeout(Duration::from_secs(10))
                .build()?,
            router_url: router_url.trim_end_matches('/').to_owned(),
            log,
            retry_after_cap: Duration::from_secs(2),
        })
    }

    pub fn log(&self) -> &Arc<SharedLog> {
        &self.log
    }

    /// Sends `op` as `api_key`, retrying the same key and bytes, until a
    /// final answer or `deadline`; returns the final answer.
    pub async fn send(&self, op: &Operation, api_key: &str, deadline: Instant) -> Option<Attempt> {
        self.log.add_operation(op.clone());
        let mut backoff = Duration::from_millis(50);
        loop {
            let (attempt, retry_after) = self.attempt(op, api_key).await;
            let is_final = attempt.is_final();
            self.log.add_attempt(attempt.clone());
            if is_final {
                return Some(attempt);
            }
            let pause = retry_after.map_or(backoff, |r| r.min(self.retry_after_cap));
            backoff = (backoff * 2).min(Duration::from_secs(1));
            if Instant::now() + pause >= deadline {
                return None;
            }
            // A retry backoff, not a stand-in for a condition.
            tokio::time::sleep(pause).await;
        }
    }

    async fn attempt(&self, op: &Operation, api_key: &str) -> (Attempt, Option<Duration>) {
        let sent_at = now_ms();
        let result = self
            .http
            .post(format!("{}/payments", self.router_url))
            .bearer_auth(api_key)
            .header("Idempotency-Key", &op.key)
            .header("Content-Type", "application/json")
            .body(op.body.clone())
            .send()
            .await;
        let mut attempt = Attempt {
            op: op.id,
            tenant: op.tenant.clone(),
            key: op.key.clone(),
            body_sha256: op.body_sha256.clone(),
            sent_at,
            answered_at: sent_at,
            status: None,
            error_code: None,
            transport_error: None,
            response_body: None,
            region: None,
            replayed: false,
        };
        let response = match result {
            Ok(r) => r,
            Err(e) => {
                attempt.answered_at = now_ms();
                attempt.transport_error = Some(error_chain(&e));
                return (attempt, None);
            }
        };
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let retry_after = header("retry-after")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        attempt.region = header("x-once-region");
        attempt.replayed = header("idempotent-replayed").as_deref() == Some("true");
        let status = response.status().as_u16();
        match response.text().await {
            Ok(body) => {
                attempt.status = Some(status);
                attempt.error_code = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|b| b["errorCode"].as_str().map(str::to_owned));
                attempt.response_body = Some(body);
            }
            // The answer was cut off: as good as none.
            Err(e) => attempt.transport_error = Some(error_chain(&e)),
        }
        attempt.answered_at = now_ms();
        (attempt, retry_after)
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// How the load runs.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    pub tenants: Vec<Tenant>,
    /// Logical payments started per second.
    pub rate: u32,
    pub duration: Duration,
    /// How long after the pacing ends clients may keep retrying.
    pub grace: Duration,
    /// How long after an acknowledgement its replay is sent.
    pub replay_after: Duration,
}

/// Runs `plan` against the router; returns once every operation has a
/// final answer or ran out of time. Attempts are in `client`'s log.
pub async fn run_load(plan: &LoadPlan, client: &PaymentClient, factory: &Arc<OperationFactory>) {
    let start = Instant::now();
    let pacing_end = start + plan.duration;
    let deadline = pacing_end + plan.grace;
    let period = Duration::from_secs_f64(1.0 / f64::from(plan.rate.max(1)));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = JoinSet::new();
    let mut tick: u64 = 0;
    while Instant::now() < pacing_end {
        ticks.tick().await;
        let tenant = plan.tenants[(tick % plan.tenants.len() as u64) as usize].clone();
        tick += 1;
        if tick % DUPLICATE_GROUP_EVERY == 0 {
            for op in factory.duplicates(&tenant.id, DUPLICATES_PER_GROUP) {
                let (client, key) = (client.clone(), tenant.api_key.clone());
                tasks.spawn(async move { client.send(&op, &key, deadline).await });
            }
            continue;
        }
        let (client, factory) = (client.clone(), factory.clone());
        let replay_after = plan.replay_after;
        tasks.spawn(async move {
            let op = factory.payment(&tenant.id);
            let answer = client.send(&op, &tenant.api_key, deadline).await?;
            if answer.status != Some(201) {
                return Some(answer);
            }
            // Scheduled, not waited on: the replay is meant to come later,
            // and at the latest when the pacing ends.
            let due = (Instant::now() + replay_after).min(pacing_end.max(Instant::now()));
            tokio::time::sleep_until(due).await;
            client
                .send(&factory.replay(&op), &tenant.api_key, deadline)
                .await;
            if op.id % MISMATCH_EVERY == 0 {
                client
                    .send(&factory.mismatched(&op), &tenant.api_key, deadline)
                    .await;
            }
            Some(answer)
        });
    }
    while tasks.join_next().await.is_some() {}
}
