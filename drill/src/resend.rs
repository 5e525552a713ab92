//! The idempotence workload, after Jepsen's TigerBeetle idempotence
//! workload: the clients keep a bounded memory of the payments they sent
//! and, on a share of the load's ticks, send one of them again — half with
//! the same key and bytes, half with the same key and another body — first
//! through another region's node than the tenant's home, under whatever
//! fault is on at the time.
//!
//! ```text
//! plain payment sent ─► memory (newest N; its stored answer noted when seen)
//! tick, with probability --resend-share ─► draw one (it leaves the memory)
//!   same body  : any remembered payment, answered or not yet (or never)
//!   other body : one whose stored answer was seen (only then is 409 the one
//!                right answer: before it, the other body may execute first)
//!   ─► another region's node (a few seconds) ─► else the router
//! ```
//!
//! A drawn payment leaves the memory, so at most one resend of a key is in
//! flight; the resend clients are their own (`PaymentClient`s keep one call
//! per key), so a resend may overlap its original. [`crate::idempotence`]
//! judges the answers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use tokio::time::Instant;

use crate::client_log::{Attempt, Operation, SharedLog};
use crate::cluster::Cluster;
use crate::load::{OperationFactory, PaymentClient, ResendCall, Resends};

/// How long a resend is tried through another region's node before the
/// router takes it: a key that exists is answered from any region, one
/// that does not yet is `421` there (it may only be created at home).
const ELSEWHERE_BUDGET: Duration = Duration::from_secs(5);

/// A payment the clients remember.
#[derive(Debug, Clone)]
struct Remembered {
    op: Operation,
    api_key: String,
    home: String,
    /// Its stored answer (`201`, `402`) was seen.
    answered: bool,
}

#[derive(Debug)]
struct Memory {
    entries: VecDeque<Remembered>,
    rng: StdRng,
}

/// The workload: the memory, the draw, and the clients resends go through.
#[derive(Debug, Clone)]
pub struct Resender {
    share: f64,
    capacity: usize,
    // A std mutex: the memory is touched between awaits, never across one.
    memory: Arc<Mutex<Memory>>,
    /// One client per region's node, each with its own calls.
    nodes: Arc<Vec<(String, PaymentClient)>>,
    router: PaymentClient,
}

/// One resend drawn from the memory, ready to send.
#[derive(Debug)]
pub struct Resend {
    pub op: Operation,
    api_key: String,
    home: String,
}

impl Resender {
    /// `share` of the ticks resend (clamped to `0..=1`), from a memory of the
    /// newest `capacity` payments; `seed` draws which and how.
    pub fn new(
        cluster: &Cluster,
        log: &Arc<SharedLog>,
        share: f64,
        capacity: usize,
        seed: u64,
    ) -> anyhow::Result<Self> {
        let nodes = cluster
            .regions
            .iter()
            .map(|r| {
                Ok((
                    r.name.clone(),
                    PaymentClient::new(&r.node.url, log.clone())?,
                ))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Self {
            share: share.clamp(0.0, 1.0),
            capacity: capacity.max(1),
            memory: Arc::new(Mutex::new(Memory {
                entries: VecDeque::new(),
                rng: StdRng::seed_from_u64(seed),
            })),
            nodes: Arc::new(nodes),
            router: PaymentClient::new(&cluster.router.url, log.clone())?,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `op` was just sent as `api_key` for a tenant homed in `home`.
    pub fn remember(&self, op: &Operation, api_key: &str, home: &str) {
        let mut memory = self.lock();
        memory.entries.push_back(Remembered {
            op: op.clone(),
            api_key: api_key.to_owned(),
            home: home.to_owned(),
            answered: false,
        });
        while memory.entries.len() > self.capacity {
            memory.entries.pop_front();
        }
    }

    /// `op`'s final answer came (or none did).
    pub fn answered(&self, op: u64, answer: Option<&Attempt>) {
        if answer.is_some_and(Attempt::is_stored_answer)
            && let Some(entry) = self.lock().entries.iter_mut().find(|e| e.op.id == op)
        {
            entry.answered = true;
        }
    }

    /// Whether this tick resends (a draw with probability `share`) and, if
    /// so, what: half the draws same body, half another body; a draw
    /// whose kind has no candidate yet is not a resend.
    pub fn draw(&self, factory: &OperationFactory) -> Option<Resend> {
        let mut memory = self.lock();
        let Memory { entries, rng } = &mut *memory;
        if !rng.random_bool(self.share) {
            return None;
        }
        let same_body = rng.random_bool(0.5);
        let candidates: Vec<usize> = (0..entries.len())
            .filter(|&i| same_body || entries[i].answered)
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let index = candidates[rng.random_range(0..candidates.len())];
        let entry = entries.remove(index)?;
        Some(Resend {
            op: factory.resend(&entry.op, same_body),
            api_key: entry.api_key,
            home: entry.home,
        })
    }

    /// Sends `resend` through a node of another region than its home (the
    /// first one after it, by the cluster's order, rotating with the
    /// operation id), for a few seconds; then through the router until
    /// `deadline`. Returns the final answer.
    pub async fn send(&self, resend: &Resend, deadline: Instant) -> Option<Attempt> {
        self.router.log().add_operation(resend.op.clone());
        let elsewhere: Vec<&(String, PaymentClient)> = self
            .nodes
            .iter()
            .filter(|(region, _)| *region != resend.home)
            .collect();
        if !elsewhere.is_empty() {
            let (_, node) = elsewhere[(resend.op.id as usize) % elsewhere.len()];
            let until = deadline.min(Instant::now() + ELSEWHERE_BUDGET);
            if let Some(answer) = node.send_logged(&resend.op, &resend.api_key, until).await {
                return Some(answer);
            }
        }
        self.router
            .send_logged(&resend.op, &resend.api_key, deadline)
            .await
    }
}

impl Resends for Resender {
    fn remember(&self, op: &Operation, api_key: &str, home: &str) {
        Resender::remember(self, op, api_key, home);
    }

    fn answered(&self, op: u64, answer: Option<&Attempt>) {
        Resender::answered(self, op, answer);
    }

    fn take_tick(&self, factory: &OperationFactory, deadline: Instant) -> Option<ResendCall> {
        let resend = self.draw(factory)?;
        let resender = self.clone();
        Some(Box::pin(
            async move { resender.send(&resend, deadline).await },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client_log::Intent;
    use crate::cluster::{Endpoint, Process, Region};

    fn cluster() -> Cluster {
        let region = |name: &str| Region {
            name: name.into(),
            node: Process {
                url: format!("http://{name}.invalid"),
                admin_url: None,
                pid: None,
            },
            store: None,
            database_url: "sqlite::memory:".into(),
        };
        serde_json::from_value(serde_json::json!({
            "router": Endpoint { url: "http://router.invalid".into(), admin_url: None, pid: None },
            "provider": Endpoint { url: "http://provider.invalid".into(), admin_url: None, pid: None },
            "tenants": [],
            "regions": [region("a"), region("b")],
        }))
        .unwrap()
    }

    fn resender(share: f64, capacity: usize) -> (Resender, OperationFactory) {
        let log = Arc::new(SharedLog::default());
        (
            Resender::new(&cluster(), &log, share, capacity, 7).unwrap(),
            OperationFactory::new("t"),
        )
    }

    #[test]
    fn the_memory_keeps_only_the_newest_payments() {
        let (resender, factory) = resender(1.0, 2);
        let ops: Vec<Operation> = (0..3).map(|_| factory.payment("t1")).collect();
        for op in &ops {
            resender.remember(op, "k", "a");
        }
        let kept: Vec<u64> = resender.lock().entries.iter().map(|e| e.op.id).collect();
        assert_eq!(kept, vec![ops[1].id, ops[2].id]);
    }

    #[test]
    fn another_body_is_sent_only_for_a_payment_whose_stored_answer_was_seen() {
        let (resender, factory) = resender(1.0, 100);
        let unanswered = factory.payment("t1");
        resender.remember(&unanswered, "k", "a");
        let mut other_bodies = 0;
        for _ in 0..50 {
            if let Some(r) = resender.draw(&factory) {
                assert_eq!(
                    r.op.intent,
                    Intent::Resend {
                        of: unanswered.id,
                        same_body: true
                    }
                );
                assert_eq!(r.op.body, unanswered.body, "byte for byte");
                break;
            }
        }
        for _ in 0..20 {
            let op = factory.payment("t1");
            resender.remember(&op, "k", "a");
            resender.answered(
                op.id,
                Some(&Attempt {
                    op: op.id,
                    tenant: "t1".into(),
                    key: op.key.clone(),
                    body_sha256: op.body_sha256.clone(),
                    sent_at: 0,
                    answered_at: 1,
                    status: Some(201),
                    error_code: None,
                    transport_error: None,
                    response_body: Some("{}".into()),
                    region: None,
                    replayed: false,
                }),
            );
        }
        while let Some(r) = resender.draw(&factory).or_else(|| resender.draw(&factory)) {
            if let Intent::Resend {
                same_body: false, ..
            } = r.op.intent
            {
                other_bodies += 1;
                assert_ne!(r.op.key, unanswered.key, "never before an answer");
            }
            if resender.lock().entries.is_empty() {
                break;
            }
        }
        assert!(other_bodies > 0);
    }

    #[test]
    fn a_share_of_zero_never_resends() {
        let (resender, factory) = resender(0.0, 10);
        resender.remember(&factory.payment("t1"), "k", "a");
        assert!((0..100).all(|_| resender.draw(&factory).is_none()));
    }
}
