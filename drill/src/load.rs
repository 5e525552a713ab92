//! Load through the router: paced logical payments spread over every tenant,
//! each sent by `once-client` (the client the API's callers use) until it
//! has a final answer, plus the
//! traffic whose correct answer the checker knows in advance — replays of
//! acknowledged keys, a key reused with a different body, and duplicates of
//! one merchant reference sent under different keys.
//!
//! ```text
//! pacer (tokio interval, --rate/s, --duration) ──► one task per logical payment
//!     task: send(op) ──retry same key+bytes on no answer/5xx/421/409 in progress/202──► final answer
//!           └─ first 201 ─► (later) replay with the same key+bytes ─► (every 10th) same key, other body
//!     every 20th tick: a group of 3 duplicates (same accountId+merchantReference, own keys)
//!     with --resend-share: a share of the other ticks re-send a remembered payment
//!     (crate::resend)
//! ```
//!
//! Every attempt lands in the [`SharedLog`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use once_client::{
    Attempt as ClientAttempt, Backoff, Client, CreatePayment, IdempotencyKey, Observer,
};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client_log::{Attempt, EpochMillis, Intent, Operation, SharedLog, body_hash};
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

    /// `original` re-sent by the idempotence workload: its key and bytes
    /// (`same_body`), or its key with a different amount.
    pub fn resend(&self, original: &Operation, same_body: bool) -> Operation {
        let intent = Intent::Resend {
            of: original.id,
            same_body,
        };
        if same_body {
            return Operation {
                id: self.next(),
                intent,
                ..original.clone()
            };
        }
        Operation {
            intent,
            ..self.mismatched(original)
        }
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
        // The body exactly as the client sends it: every attempt of the
        // operation sends these bytes, and the checker hashes them.
        let request = CreatePayment::new(
            account_id.clone(),
            format!("{}.{:02}", amount_minor / 100, amount_minor % 100),
            "EUR",
            merchant_reference.clone(),
        );
        let body = String::from_utf8_lossy(&request.body()).into_owned();
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

/// Sends operations through the router with `once-client`, the client the
/// API's callers use (one key and one body per call, retried until final,
/// `202` polled by re-sending), and logs every attempt it reports.
#[derive(Debug, Clone)]
pub struct PaymentClient {
    router_url: String,
    log: Arc<SharedLog>,
    /// One client per API key: a client authenticates as one tenant.
    clients: Arc<Mutex<HashMap<String, Client>>>,
    calls: Arc<Calls>,
}

/// The operation each idempotency key is being sent for right now. A key's
/// operations (a payment, its replay, its mismatched body) go one after
/// another from one task, never at once, so the key names the operation.
#[derive(Debug, Default)]
struct Calls(Mutex<HashMap<String, Call>>);

#[derive(Debug)]
struct Call {
    op: u64,
    tenant: String,
    body_sha256: String,
    /// The call's latest attempt, as logged.
    last: Option<Attempt>,
}

impl Calls {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Call>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the client reports, in the drill's log.
#[derive(Debug)]
struct Logger {
    log: Arc<SharedLog>,
    calls: Arc<Calls>,
}

impl Observer for Logger {
    fn attempt(&self, reported: &ClientAttempt) {
        let Some(key) = &reported.idempotency_key else {
            return;
        };
        let mut calls = self.calls.lock();
        let Some(call) = calls.get_mut(key.as_str()) else {
            return;
        };
        let attempt = Attempt {
            op: call.op,
            tenant: call.tenant.clone(),
            key: key.as_str().to_owned(),
            body_sha256: call.body_sha256.clone(),
            sent_at: epoch_ms(reported.sent_at),
            answered_at: epoch_ms(reported.answered_at),
            status: reported.status,
            error_code: reported.error_code.clone(),
            transport_error: reported.transport_error.clone(),
            response_body: reported
                .body
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned()),
            region: reported.region.clone(),
            replayed: reported.replayed,
        };
        self.log.add_attempt(attempt.clone());
        call.last = Some(attempt);
    }
}

fn epoch_ms(at: SystemTime) -> EpochMillis {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The client's request for `op`: its key, and the fields of its body (the
/// factory made the body with the client's own serialization, so the
/// bytes sent are the operation's).
fn request_of(op: &Operation) -> anyhow::Result<CreatePayment> {
    let body: serde_json::Value = serde_json::from_str(&op.body)?;
    let field = |name: &str| {
        body[name]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow::anyhow!("operation {} has no {name}", op.id))
    };
    let key = IdempotencyKey::parse(op.key.as_bytes())?;
    Ok(CreatePayment::new(
        field("accountId")?,
        field("amount")?,
        field("currency")?,
        field("merchantReference")?,
    )
    .idempotency_key(key))
}

impl PaymentClient {
    pub fn new(router_url: &str, log: Arc<SharedLog>) -> anyhow::Result<Self> {
        Ok(Self {
            router_url: router_url.trim_end_matches('/').to_owned(),
            log,
            clients: Arc::default(),
            calls: Arc::default(),
        })
    }

    pub fn log(&self) -> &Arc<SharedLog> {
        &self.log
    }

    fn client_for(&self, api_key: &str) -> anyhow::Result<Client> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(api_key) {
            return Ok(client.clone());
        }
        let client = Client::builder(&self.router_url, api_key)
            // Calls end at the drill's own deadline (`until`), not before.
            .deadline(Duration::from_secs(3600))
            .attempt_timeout(Duration::from_secs(10))
            .backoff(Backoff {
                initial: Duration::from_millis(50),
                max: Duration::from_secs(1),
                multiplier: 2.0,
            })
            .observer(Logger {
                log: self.log.clone(),
                calls: self.calls.clone(),
            })
            .build()?;
        clients.insert(api_key.to_owned(), client.clone());
        Ok(client)
    }

    /// Sends `op` as `api_key`, retrying the same key and bytes, until a
    /// final answer or `deadline`; returns the final answer (`None`: none
    /// came in time, or the operation could not be sent at all, which is
    /// logged).
    pub async fn send(&self, op: &Operation, api_key: &str, deadline: Instant) -> Option<Attempt> {
        self.log.add_operation(op.clone());
        self.send_logged(op, api_key, deadline).await
    }

    /// [`Self::send`] for an operation already in the log (sent before
    /// through another client): its attempts join the ones it has.
    pub async fn send_logged(
        &self,
        op: &Operation,
        api_key: &str,
        deadline: Instant,
    ) -> Option<Attempt> {
        let prepared = self
            .client_for(api_key)
            .and_then(|client| Ok((client, request_of(op)?)));
        let (client, request) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => {
                tracing::error!(op = op.id, error = %format!("{e:#}"), "operation not sent");
                return None;
            }
        };
        debug_assert_eq!(request.body(), op.body.as_bytes(), "the factory's bytes");
        self.calls.lock().insert(
            op.key.clone(),
            Call {
                op: op.id,
                tenant: op.tenant.clone(),
                body_sha256: op.body_sha256.clone(),
                last: None,
            },
        );
        // Every outcome is in the log; the last attempt says which.
        let _ = client.create_payment(request.until(deadline)).await;
        let call = self.calls.lock().remove(&op.key)?;
        call.last.filter(Attempt::is_final)
    }
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
    /// The idempotence workload, when on: a share of the ticks re-send a
    /// remembered payment instead of starting one.
    pub resend: Option<Arc<dyn Resends>>,
}

/// A resend as the pacer runs it: its final answer, or none.
pub type ResendCall = std::pin::Pin<Box<dyn std::future::Future<Output = Option<Attempt>> + Send>>;

/// A workload that remembers the plain payments and may take a tick for a
/// resend of one (the idempotence workload, `crate::resend`). A trait
/// here so the load does not depend on the workload built on it.
pub trait Resends: std::fmt::Debug + Send + Sync {
    /// `op` was just sent as `api_key` for a tenant homed in `home`.
    fn remember(&self, op: &Operation, api_key: &str, home: &str);
    /// `op`'s final answer came (or none did).
    fn answered(&self, op: u64, answer: Option<&Attempt>);
    /// This tick's resend, to run until `deadline`; `None`: a plain payment.
    fn take_tick(&self, factory: &OperationFactory, deadline: Instant) -> Option<ResendCall>;
}

/// Runs `plan` against the router; returns once every operation has a
/// final answer or ran out of time. Attempts are in `client`'s log.
pub async fn run_load(plan: &LoadPlan, client: &PaymentClient, factory: &Arc<OperationFactory>) {
    let pacing_end = Instant::now() + plan.duration;
    let deadline = pacing_end + plan.grace;
    run_paced(
        plan,
        client,
        factory,
        tokio::time::sleep_until(pacing_end),
        |_| deadline,
        Some(pacing_end),
    )
    .await;
}

/// Like [`run_load`], but the pacing goes on until `stop` resolves (the
/// chaos drill stops it when its schedule is done); each operation may
/// retry for `plan.duration + plan.grace` from its start.
pub async fn run_load_until(
    plan: &LoadPlan,
    client: &PaymentClient,
    factory: &Arc<OperationFactory>,
    stop: impl std::future::Future<Output = ()>,
) {
    let allowed = plan.duration + plan.grace;
    run_paced(plan, client, factory, stop, |now| now + allowed, None).await;
}

/// The pacer: one logical operation per tick until `stop`, each with the
/// deadline `deadline_of` its start; replays are due `replay_after` an
/// acknowledgement, but no later than `pacing_end` when it is known.
async fn run_paced(
    plan: &LoadPlan,
    client: &PaymentClient,
    factory: &Arc<OperationFactory>,
    stop: impl std::future::Future<Output = ()>,
    deadline_of: impl Fn(Instant) -> Instant,
    pacing_end: Option<Instant>,
) {
    let period = Duration::from_secs_f64(1.0 / f64::from(plan.rate.max(1)));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = JoinSet::new();
    let mut tick: u64 = 0;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = ticks.tick() => {}
        }
        let deadline = deadline_of(Instant::now());
        let tenant = plan.tenants[(tick % plan.tenants.len() as u64) as usize].clone();
        tick += 1;
        if tick % DUPLICATE_GROUP_EVERY == 0 {
            for op in factory.duplicates(&tenant.id, DUPLICATES_PER_GROUP) {
                let (client, key) = (client.clone(), tenant.api_key.clone());
                tasks.spawn(async move { client.send(&op, &key, deadline).await });
            }
            continue;
        }
        if let Some(resend) = plan
            .resend
            .as_ref()
            .and_then(|r| r.take_tick(factory, deadline))
        {
            tasks.spawn(resend);
            continue;
        }
        let (client, factory) = (client.clone(), factory.clone());
        let replay_after = plan.replay_after;
        let resender = plan.resend.clone();
        tasks.spawn(async move {
            let op = factory.payment(&tenant.id);
            if let Some(resender) = &resender {
                resender.remember(&op, &tenant.api_key, &tenant.home_region);
            }
            let answer = client.send(&op, &tenant.api_key, deadline).await;
            if let Some(resender) = &resender {
                resender.answered(op.id, answer.as_ref());
            }
            let answer = answer?;
            if answer.status != Some(201) {
                return Some(answer);
            }
            // Scheduled, not waited on: the replay is meant to come later,
            // and at the latest when the pacing ends.
            let mut due = Instant::now() + replay_after;
            if let Some(end) = pacing_end {
                due = due.min(end.max(Instant::now()));
            }
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
