//! The node's delivery task: fan out new events, take back dead letters an
//! operator redrove, claim due deliveries and attempt each, until shutdown.
//!
//! Every ten minutes it also prunes events past their retention
//! ([`retention`]).
//!
//! Its budget is its own: a pool of its own on PostgreSQL, at most
//! `concurrency` attempts in flight, at most `per_endpoint` of them to one
//! endpoint (an endpoint that hangs holds only those, for at most its
//! timeout each), no redirects followed. Nothing on the payment path waits
//! on it. Stopping mid-attempt is safe: the lease runs out and the delivery
//! is attempted again, under the same event id.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, USER_AGENT};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tracing::{Instrument, debug, info_span, warn};

use super::deliveries::{self, Claimed};
use super::{Webhooks, endpoints, retention, schedule, signature, targets};
use crate::domain::UnixMillis;

/// How often redrive requests are looked for.
const REDRIVE_EVERY: Duration = Duration::from_secs(1);
/// How often events past their retention are pruned (first at start).
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// Attempts in flight per endpoint, shared by the loop and the attempts.
/// A std mutex: held only to count, never across an `.await`.
type InFlight = Arc<Mutex<HashMap<String, usize>>>;

pub async fn run(webhooks: Webhooks, mut shutdown: watch::Receiver<bool>) {
    let mut builder = reqwest::Client::builder()
        .timeout(webhooks.config.attempt_timeout)
        .connect_timeout(webhooks.config.attempt_timeout)
        .redirect(reqwest::redirect::Policy::none());
    if !webhooks.config.allow_private_targets {
        builder = builder.dns_resolver(Arc::new(targets::PublicOnly));
    }
    let client = match builder.build() {
        Ok(client) => client,
        Err(e) => {
            warn!(error = %e, "webhook delivery client did not build; webhooks are not delivered");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(webhooks.config.concurrency));
    let in_flight: InFlight = Arc::default();
    let mut attempts = JoinSet::new();
    let mut last_redrive = tokio::time::Instant::now() - REDRIVE_EVERY;
    let mut last_prune: Option<tokio::time::Instant> = None;
    loop {
        while attempts.try_join_next().is_some() {}
        let mut busy = false;
        let now = webhooks.clock.now();
        match deliveries::fan_out(&webhooks.db, now).await {
            Ok(n) => busy |= n > 0,
            Err(e) => {
                warn!(error = %format!("{e:#}"), "fanning out webhook events failed; will retry")
            }
        }
        if last_redrive.elapsed() >= REDRIVE_EVERY {
            if let Err(e) = deliveries::redrive_requested(&webhooks.db, now).await {
                warn!(error = %format!("{e:#}"), "redriving webhook deliveries failed; will retry");
            }
            last_redrive = tokio::time::Instant::now();
        }
        if last_prune.is_none_or(|at| at.elapsed() >= PRUNE_EVERY) {
            match retention::prune(&webhooks.db, now).await {
                Ok(0) => {}
                Ok(n) => debug!(events = n, "pruned webhook events past their retention"),
                Err(e) => {
                    warn!(error = %format!("{e:#}"), "pruning webhook events failed; will retry")
                }
            }
            last_prune = Some(tokio::time::Instant::now());
        }
        let free = slots.available_permits();
        if free > 0 {
            let saturated: Vec<String> = {
                let counts = in_flight.lock().expect("in-flight lock");
                counts
                    .iter()
                    .filter(|(_, n)| **n >= webhooks.config.per_endpoint)
                    .map(|(id, _)| id.clone())
                    .collect()
            };
            let lease_until = UnixMillis(now.0 + millis(webhooks.config.lease()));
            match deliveries::claim(&webhooks.db, now, lease_until, free, &saturated).await {
                Ok(claimed) => {
                    busy |= !claimed.is_empty();
                    for delivery in claimed {
                        let share_left = {
                            let mut counts = in_flight.lock().expect("in-flight lock");
                            let n = counts.entry(delivery.endpoint_id.clone()).or_default();
                            let left = *n < webhooks.config.per_endpoint;
                            if left {
                                *n += 1;
                            }
                            left
                        };
                        let permit = match slots.clone().try_acquire_owned() {
                            Ok(permit) if share_left => permit,
                            _ => {
                                if share_left {
                                    release_share(&in_flight, &delivery.endpoint_id);
                                }
                                // Claimed in the same round as others to its
                                // endpoint beyond its share: back, due after
                                // a poll, no attempt counted.
                                let due = UnixMillis(now.0 + millis(webhooks.config.poll_interval));
                                if let Err(e) =
                                    deliveries::release(&webhooks.db, &delivery, due).await
                                {
                                    warn!(error = %format!("{e:#}"), "handing back a webhook delivery failed; its lease will free it");
                                }
                                continue;
                            }
                        };
                        let (webhooks, client, in_flight) =
                            (webhooks.clone(), client.clone(), in_flight.clone());
                        let span = info_span!("deliver a webhook", event = %delivery.event.event_id, endpoint = %delivery.endpoint_id);
                        attempts.spawn(
                            async move {
                                let endpoint = delivery.endpoint_id.clone();
                                if let Err(e) = attempt(&webhooks, &client, &delivery).await {
                                    warn!(error = %format!("{e:#}"), "recording a webhook attempt failed; the lease will free it");
                                }
                                release_share(&in_flight, &endpoint);
                                drop(permit);
                            }
                            .instrument(span),
                        );
                    }
                }
                Err(e) => {
                    warn!(error = %format!("{e:#}"), "claiming webhook deliveries failed; will retry")
                }
            }
        }
        if *shutdown.borrow() {
            return;
        }
        if busy && slots.available_permits() > 0 {
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(webhooks.config.poll_interval) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// One attempt of one delivery, and its outcome recorded.
async fn attempt(
    webhooks: &Webhooks,
    client: &reqwest::Client,
    delivery: &Claimed,
) -> anyhow::Result<()> {
    let now = webhooks.clock.now();
    let target = endpoints::target(
        &webhooks.db,
        &webhooks.data_keys,
        &delivery.endpoint_id,
        now,
    )
    .await?;
    let Some(target) = target.filter(|t| !t.deleted) else {
        return deliveries::cancelled(&webhooks.db, delivery, now).await;
    };
    // A literal address is not resolved, so the resolver cannot judge it.
    let refused = if webhooks.config.allow_private_targets {
        None
    } else {
        url::Url::parse(&target.url)
            .map_or_else(|e| Some(format!("url: {e}")), |u| targets::refused_host(&u))
    };
    let error = match refused {
        Some(why) => {
            warn!(endpoint = ?delivery.endpoint_id, %why, "webhook target refused");
            Some(why)
        }
        None => attempt_error(signed_post(client, &target, delivery, now)?.send().await),
    };
    let now = webhooks.clock.now();
    match error {
        None => deliveries::delivered(&webhooks.db, delivery, now).await,
        Some(error) => {
            let failed = u32::try_from(delivery.attempts + 1).unwrap_or(u32::MAX);
            debug!(%error, attempts = failed, "webhook attempt failed");
            match schedule::next_attempt(&webhooks.config, failed, delivery.retry_since, now.0) {
                Some(next) => {
                    deliveries::retry_at(&webhooks.db, delivery, UnixMillis(next), &error).await
                }
                None => deliveries::dead_letter(&webhooks.db, delivery, &error, now).await,
            }
        }
    }
}

/// The signed POST of `delivery`'s event to `target`, stamped `now`.
fn signed_post(
    client: &reqwest::Client,
    target: &endpoints::Target,
    delivery: &Claimed,
    now: UnixMillis,
) -> anyhow::Result<reqwest::RequestBuilder> {
    let body = delivery.event.render();
    let t = now.0.div_euclid(1000);
    let secrets: Vec<&str> = target.secrets.iter().map(String::as_str).collect();
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(USER_AGENT, HeaderValue::from_static("once-webhooks/1"));
    headers.insert(
        signature::HEADER,
        HeaderValue::from_str(&signature::header(&secrets, t, &body))?,
    );
    headers.insert(
        signature::EVENT_ID_HEADER,
        HeaderValue::from_str(&delivery.event.event_id)?,
    );
    Ok(client.post(&target.url).headers(headers).body(body))
}

/// What went wrong with one POST to a merchant, or `None` for a 2xx.
fn attempt_error(outcome: reqwest::Result<reqwest::Response>) -> Option<String> {
    match outcome {
        Ok(answer) if answer.status().is_success() => None,
        Ok(answer) => Some(format!("endpoint answered {}", answer.status().as_u16())),
        Err(e) if e.is_timeout() => Some("endpoint did not answer in time".to_owned()),
        Err(e) => Some(format!(
            "endpoint unreachable: {}",
            crate::events::outbox::error_chain(&e)
        )),
    }
}

/// Gives back one of `endpoint`'s in-flight shares, and forgets an
/// endpoint with none left.
fn release_share(in_flight: &InFlight, endpoint: &str) {
    let mut counts = in_flight.lock().expect("in-flight lock");
    if let Some(n) = counts.get_mut(endpoint) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(endpoint);
        }
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
