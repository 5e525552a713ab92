//! Creating a payment under the idempotency contract: claim, decide, and
//! either answer from the record or run the payment from its last recovery
//! point to the end.
//!
//! ```text
//! claim (at PROVIDER_REQUEST_SENT, with the pending payment) ──won──► charge ─► finish (COMPLETED | FAILED_REPLAYABLE)
//!   │                                                             │
//!   └─lost─► decide(record) ─► replay | 409 | 202 | take over ────┘ (resume at the recorded step;
//!                                                                    ask the provider before charging)
//! ```
//!
//! Everything after the claim runs under the record's fence: if another
//! request takes the record over, our next write is refused and we answer
//! from whatever the new owner leaves behind.

use std::time::Duration;

use tracing::{Instrument, info, instrument, warn};

use super::error::EngineError;
use crate::auth::Caller;
use crate::domain::{IdempotencyKey, PaymentId, UnixMillis};
use crate::failpoints::{crash_point, hold_point};
use crate::idempotency::fingerprint::CURRENT_VERSION;
use crate::idempotency::{Decision, Record, Scope, Status, Step, StoredResponse, decide};
use crate::metrics::{FinishLabels, Outcome};
use crate::payments::command::CreatePayment;
use crate::payments::model::{NewPayment, OutboxEvent, Payment, PaymentStatus, PaymentUpdate};
use crate::payments::response;
use crate::provider::{ChargeOutcome, ChargeRequest, ProviderError};
use crate::state::AppState;
use crate::store::{Claim, ClaimOutcome, Finish, Owned, Reclaim, StoreError};

/// The operation name in every scoped key this module claims.
pub const OPERATION: &str = crate::idempotency::record::CREATE_PAYMENT;

/// How many times one request re-reads a record after losing a takeover
/// race before it tells the client to retry.
const MAX_ROUNDS: usize = 3;

/// The answer to a `POST /payments`, before it becomes an HTTP response.
#[derive(Debug)]
pub enum Answer {
    /// A stored answer: fresh (`replayed == false`) or replayed.
    Stored {
        response: StoredResponse,
        replayed: bool,
        original_trace_id: Option<String>,
        outcome: Outcome,
    },
    /// The provider's outcome is being recovered: 202 with a pending body.
    Pending {
        payment_id: Option<PaymentId>,
        retry_after: Duration,
    },
}

/// The request as the engine sees it.
#[derive(Debug)]
pub struct CreatePaymentRequest {
    pub caller: Caller,
    pub key: IdempotencyKey,
    pub api_version: String,
    pub command: CreatePayment,
    pub trace_id: Option<String>,
}

/// The scope `req` claims its key in.
fn scope_of(req: &CreatePaymentRequest) -> Scope {
    Scope {
        tenant: req.caller.tenant.clone(),
        principal: req.caller.principal.clone(),
        operation: OPERATION,
        key: req.key.clone(),
    }
}

/// The replay of `req` from this node's memory, when its record is cached:
/// a finished record never changes inside its window, so the answer needs
/// no store, no task and no lease. `None` sends the request down the whole
/// path ([`create_payment`]), which decides everything else (a different
/// request under the key included).
pub fn replay_from_memory(state: &AppState, req: &CreatePaymentRequest) -> Option<Answer> {
    let cached = state.replays.get(&scope_of(req), state.clock.now())?;
    (same_request(&cached, req) == Some(true)).then(|| replayed(state, &cached))
}

/// The whole path: claim, decide, run. Callers ask [`replay_from_memory`]
/// first; a record cached since then comes back from the store as
/// `Existing` and is replayed from there.
#[instrument(name = "create payment", skip_all, fields(tenant = %req.caller.tenant, outcome))]
pub async fn create_payment(
    state: AppState,
    req: CreatePaymentRequest,
) -> Result<Answer, EngineError> {
    let now = state.clock.now();
    let scope = scope_of(&req);
    let fingerprint = req
        .command
        .fingerprint(CURRENT_VERSION, &req.api_version)
        .expect("the current fingerprint version is always known");
    let claim = Claim {
        scope,
        fingerprint,
        payment: NewPayment {
            id: PaymentId::generate(),
            tenant: req.caller.tenant.clone(),
            account_id: req.command.account_id.clone(),
            merchant_reference: req.command.merchant_reference.clone(),
            amount: req.command.amount,
            channel: req.command.channel,
            region: state.config.region.clone(),
        },
        now,
        lease: state.config.lease,
        trace_id: req.trace_id.clone(),
        region: state.config.region.clone(),
        response_schema: state.config.response_schema,
    };

    let mut outcome = state.store.requests.claim(&claim).await?;
    crash_point("after_claim");
    let mut took_over = false;
    // The store refused to renew a record this node's clock finds expired:
    // by the store's clock (raft mode: the leader's) it is still in its
    // window, and that clock decides.
    let mut renew_refused = false;
    for _ in 0..MAX_ROUNDS {
        let existing = match outcome {
            ClaimOutcome::Claimed(owned) => {
                return run(&state, owned, &claim.payment, took_over).await;
            }
            ClaimOutcome::BusinessKeyTaken { record, existing } => {
                return reject_duplicate_reference(&state, record, existing).await;
            }
            ClaimOutcome::Existing(record) => record,
        };
        let how = match decide(&existing, same_request(&existing, &req), state.clock.now()) {
            Decision::Mismatch => {
                state.metrics.conflicts_different_request.inc();
                return Err(EngineError::KeyReusedWithDifferentRequest);
            }
            Decision::Replay => return replay(&state, existing),
            // No lease has more than a lease left; in the raft mode the
            // leader's clock stamped it, which this node's may not match.
            Decision::InProgress { retry_after } => {
                return Err(EngineError::InProgress {
                    retry_after: retry_after.min(state.config.lease),
                });
            }
            Decision::Incomparable => {
                return Err(EngineError::Unavailable(anyhow::anyhow!(
                    "record fingerprinted with unknown version {}",
                    existing.fingerprint_version
                )));
            }
            Decision::TakeOver => Reclaim::Resume,
            Decision::Restart => Reclaim::Restart,
            Decision::Renew if renew_refused => return replay(&state, existing),
            Decision::Renew => Reclaim::Renew,
        };
        let claim = Claim {
            now: state.clock.now(),
            ..claim.clone()
        };
        match state.store.requests.reclaim(&existing, how, &claim).await? {
            Some(won) => {
                match how {
                    Reclaim::Resume => {
                        state.metrics.takeovers.inc();
                        took_over = true;
                        info!(step = %existing.step, fence = existing.fence + 1, "took over a record whose lease expired");
                    }
                    Reclaim::Renew => {
                        state.metrics.expired_retries.inc();
                    }
                    Reclaim::Restart => {}
                }
                outcome = won;
            }
            // Someone else took it over first, or the store's clock says
            // it is not expired: look again.
            None => {
                renew_refused |= how == Reclaim::Renew;
                outcome = match state.store.requests.load(&claim.scope).await? {
                    Some(record) => ClaimOutcome::Existing(record),
                    None => state.store.requests.claim(&claim).await?,
                };
            }
        }
    }
    Err(EngineError::InProgress {
        retry_after: Duration::from_secs(1),
    })
}

/// `Ok` while at least half of the owned record's lease is left;
/// otherwise the time it has left.
fn lease_is_fresh(state: &AppState, record: &Record) -> Result<(), Duration> {
    lease_is_fresh_after(state, record, Duration::ZERO)
}

/// As [`lease_is_fresh`], `wait` from now.
fn lease_is_fresh_after(state: &AppState, record: &Record, wait: Duration) -> Result<(), Duration> {
    let left = state.clock.now().plus(wait).until(record.locked_until);
    if left >= state.config.lease / 2 {
        Ok(())
    } else {
        Err(left)
    }
}

/// Whether `req` is the request `record` was claimed for, comparing
/// fingerprints at the record's version; `None` when this build does not
/// know that version.
fn same_request(record: &Record, req: &CreatePaymentRequest) -> Option<bool> {
    req.command
        .fingerprint(record.fingerprint_version, &req.api_version)
        .map(|fp| fp.hash == record.fingerprint)
}

/// Replays a finished record read from the store, and caches it so the
/// next retry needs no round trip.
fn replay(state: &AppState, record: Record) -> Result<Answer, EngineError> {
    if record.response.is_none() {
        return Err(EngineError::Internal(anyhow::anyhow!(
            "finished record without a stored response"
        )));
    }
    state.replays.remember(&record);
    Ok(replayed(state, &record))
}

/// The replay answer of a finished record that has a stored response.
fn replayed(state: &AppState, record: &Record) -> Answer {
    state.metrics.replays.inc();
    Answer::Stored {
        response: record
            .response
            .clone()
            .expect("replayable records carry their response"),
        replayed: true,
        original_trace_id: record.trace_id.clone(),
        outcome: Outcome::Replayed,
    }
}

/// The business key belongs to another payment: a deterministic business
/// rejection, stored so that retries of this key replay the same 409.
async fn reject_duplicate_reference(
    state: &AppState,
    record: Record,
    existing: PaymentId,
) -> Result<Answer, EngineError> {
    let now = state.clock.now();
    let response = response::duplicate_reference(&existing, state.config.response_schema);
    let finish = Finish {
        status: Status::FailedReplayable,
        response: response.clone(),
        payment: None,
        event: None,
        now,
        expires_at: now.plus(state.config.replay_window),
    };
    match state.store.requests.finish(&record, &finish).await {
        Ok(()) => {
            state.replays.remember(&finished(record, &finish));
            Ok(Answer::Stored {
                response,
                replayed: false,
                original_trace_id: None,
                outcome: Outcome::Rejected,
            })
        }
        Err(StoreError::Fenced) => answer_after_losing(state, &record).await,
        Err(e) => Err(e.into()),
    }
}

/// Drives an owned record from its recorded step to the end. `took_over`
/// only labels the outcome (executed or recovered).
#[instrument(name = "run payment from its recovery point", skip_all, fields(step = %owned.record.step, fence = owned.record.fence))]
async fn run(
    state: &AppState,
    owned: Owned,
    facts: &NewPayment,
    took_over: bool,
) -> Result<Answer, EngineError> {
    let Owned {
        mut record,
        charge_may_have_been_sent,
        answer_schema,
        facts: kept,
    } = owned;
    // The payment as its first owner claimed it, where the store kept it:
    // its region, not this node's, is in the answer.
    let facts = kept.as_ref().unwrap_or(facts);
    let payment_id = record.payment_id.clone().ok_or_else(|| {
        EngineError::Internal(anyhow::anyhow!(
            "owned record at {} without a payment",
            record.step
        ))
    })?;
    let provider_key = record
        .provider_key
        .clone()
        .unwrap_or_else(|| payment_id.provider_key());
    let charge = ChargeRequest {
        account_id: facts.account_id.clone(),
        amount: facts.amount,
        merchant_reference: facts.merchant_reference.clone(),
    };

    // The lease was stamped when the claim (or takeover) was proposed; a
    // store slow to commit it — an election, client retries — may hand it
    // back mostly spent, or already expired. Charging then would race a
    // retry that takes the record over (the provider key keeps that to one
    // charge, but the lease is there so it never comes to that), so leave
    // it: the record stays unfinished, and whoever resumes it asks the
    // provider by key first. Half the lease is the line: a claim that took
    // that long to commit was held up, not merely slow.
    if let Err(left) = lease_is_fresh(state, &record) {
        warn!(
            left_ms = left.as_millis() as u64,
            "the lease came back mostly spent; leaving the record to be resumed"
        );
        return Err(EngineError::Unavailable(anyhow::anyhow!(
            "the idempotency record's lease came back with only {left:?} left"
        )));
    }
    // Whether an earlier attempt of this key made the charge this answer
    // reports: its client may already hold the answer (decision 0054 sends
    // it before the finish), so this one is that answer replayed (I2).
    let mut charged_earlier = false;
    let charged = match record.step {
        Step::Received | Step::LocalPaymentCreated => {
            // Persisted before the call: from here on a crash means "the
            // provider may have seen it", and recovery asks before charging.
            let now = state.clock.now();
            if let Err(e) = state
                .store
                .requests
                .advance(&record, Step::ProviderRequestSent, now)
                .await
            {
                return lost_or_failed(state, &record, e).await;
            }
            record.step = Step::ProviderRequestSent;
            crash_point("after_provider_request_sent");
            state.provider.charge(&provider_key, &charge).await
        }
        // Claimed straight at `PROVIDER_REQUEST_SENT` (one durable write
        // fewer per payment), and the store says no earlier owner can have
        // reached the provider: charge.
        Step::ProviderRequestSent if !charge_may_have_been_sent => {
            crash_point("after_provider_request_sent");
            state.provider.charge(&provider_key, &charge).await
        }
        // A previous owner may have charged: ask first, and only if the
        // provider has never seen this key send the charge (under the same
        // key, so a late duplicate of the old request is deduped too).
        Step::ProviderRequestSent | Step::ProviderConfirmed | Step::Completed => {
            match state.provider.lookup(&provider_key).await {
                Ok(Some(outcome)) => {
                    charged_earlier = true;
                    Ok(outcome)
                }
                Ok(None) => state.provider.charge(&provider_key, &charge).await,
                Err(e) => Err(e),
            }
        }
    };
    crash_point("after_provider_charge");

    let outcome = match charged {
        Ok(outcome) => outcome,
        Err(ProviderError::NotCharged(reason)) => {
            warn!(%reason, "provider refused before charging; the operation may be retried");
            let now = state.clock.now();
            return match state
                .store
                .requests
                .fail_retryable(
                    &record,
                    "PROVIDER_UNAVAILABLE",
                    now,
                    now.plus(state.config.replay_window),
                )
                .await
            {
                Ok(()) => Err(EngineError::Unavailable(anyhow::anyhow!(
                    "provider refused before charging: {reason}"
                ))),
                Err(e) => lost_or_failed(state, &record, e).await,
            };
        }
        Err(ProviderError::Unknown(reason)) => {
            // Never guess: the record becomes UNKNOWN_REQUIRES_RECOVERY, and
            // the next owner (a client retry at once, or the recovery worker
            // after a backoff that doubles with every failed recovery) asks
            // the provider by key.
            warn!(%reason, "provider outcome unknown; left for recovery");
            state.metrics.unknown_state.inc();
            let backoff = recovery_backoff(state.config.recovery_interval, record.takeovers);
            let retry_at = state.clock.now().plus(backoff);
            return match state
                .store
                .requests
                .mark_unknown(&record, state.clock.now(), retry_at)
                .await
            {
                Ok(()) => Ok(Answer::Pending {
                    payment_id: Some(payment_id),
                    retry_after: backoff,
                }),
                Err(e) => lost_or_failed(state, &record, e).await,
            };
        }
    };

    let schema = answer_schema.unwrap_or(state.config.response_schema);
    let (finish, settled) = final_state(
        state,
        &payment_id,
        facts,
        record.created_at,
        outcome,
        schema,
    );
    let answer = Answer::Stored {
        response: finish.response.clone(),
        replayed: charged_earlier,
        original_trace_id: charged_earlier.then(|| record.trace_id.clone()).flatten(),
        outcome: if took_over {
            Outcome::Recovered
        } else {
            Outcome::Executed
        },
    };
    if state.config.answer_before_finish {
        // Every owner renders this outcome into these bytes, so the answer
        // need not wait for the finish (decision 0054): retries here replay
        // it from memory at once, and should the finish never land, whoever
        // takes the record over asks the provider by key and renders it
        // again, byte for byte.
        state.replays.remember(&finished(record.clone(), &finish));
        state.finishing.spawn(
            settled,
            finish_after_answer(state.clone(), record, finish).in_current_span(),
        );
        return Ok(answer);
    }
    if let Err(e) = state.store.requests.finish(&record, &finish).await {
        return lost_or_failed(state, &record, e).await;
    }
    crash_point("after_finish");
    state.replays.remember(&finished(record, &finish));
    Ok(answer)
}

/// The finish of an operation whose answer is already on its way: the
/// record, then the payment's row and event. A store that cannot be reached
/// is tried again a few times while half the lease is left. Nothing is lost
/// if it still fails or the process dies first: the record stays owned at
/// `PROVIDER_REQUEST_SENT` until its lease runs out, and its next owner (a
/// retry, the recovery worker) asks the provider by key and renders the
/// same answer; a finish fenced by such an owner leaves the work to it.
#[instrument(name = "finish after the answer", skip_all)]
async fn finish_after_answer(state: AppState, record: Record, finish: Finish) {
    hold_point("before_finish_after_answer").await;
    let mut backoff = Duration::from_millis(50);
    let result = loop {
        match state.store.requests.finish(&record, &finish).await {
            Ok(()) => {
                crash_point("after_finish");
                break "written";
            }
            Err(StoreError::Fenced) => {
                info!(
                    "the record was taken over before its finish landed; its new owner finishes it"
                );
                break "taken_over";
            }
            Err(e) if lease_is_fresh_after(&state, &record, backoff).is_ok() => {
                warn!(error = %format!("{e:#}"), ?backoff, "the finish after the answer failed; trying again");
                tokio::time::sleep(backoff).await;
                backoff *= 4;
            }
            Err(e) => {
                warn!(
                    error = %format!("{e:#}"),
                    "the finish after the answer failed; the record is recovered once its lease runs out"
                );
                break "failed";
            }
        }
    };
    state
        .metrics
        .finishes_after_answer
        .get_or_create(&FinishLabels {
            result: result.to_owned(),
        })
        .inc();
}

/// The terminal write for a provider outcome: the payment's final state,
/// the answer the client receives (and every retry replays), the event;
/// and the payment as that write settles it.
pub(crate) fn final_state(
    state: &AppState,
    payment_id: &PaymentId,
    facts: &NewPayment,
    created_at: UnixMillis,
    outcome: ChargeOutcome,
    schema: response::ResponseSchema,
) -> (Finish, Payment) {
    let now = state.clock.now();
    let payment = Payment {
        id: payment_id.clone(),
        tenant: facts.tenant.clone(),
        account_id: facts.account_id.clone(),
        merchant_reference: facts.merchant_reference.clone(),
        amount: facts.amount,
        channel: facts.channel,
        status: PaymentStatus::Pending,
        provider_charge_id: None,
        decline_code: None,
        // The region that took the payment, which every owner reads from
        // its facts: an answer rendered by another region's recovery
        // matches the first owner's byte for byte.
        region: facts.region.clone(),
        created_at,
        updated_at: now,
    };
    let (status, response, payment, event_type) = match outcome {
        ChargeOutcome::Approved { charge_id } => {
            let payment = Payment {
                status: PaymentStatus::Succeeded,
                provider_charge_id: Some(charge_id),
                ..payment
            };
            (
                Status::Completed,
                response::created(&payment, schema),
                payment,
                "payment.succeeded",
            )
        }
        ChargeOutcome::Declined { code } => {
            let payment = Payment {
                status: PaymentStatus::Declined,
                decline_code: Some(code.clone()),
                ..payment
            };
            (
                Status::FailedReplayable,
                response::declined(&payment, &code, schema),
                payment,
                "payment.declined",
            )
        }
    };
    let update = update_of(&payment);
    let finish = Finish {
        status,
        response,
        event: Some(event(payment_id, event_type, facts, &update)),
        payment: Some(update),
        now,
        expires_at: now.plus(state.config.replay_window),
    };
    (finish, payment)
}

/// How long the recovery worker leaves an unknown outcome alone after its
/// `attempts`-th failed recovery: the worker's interval, doubling, at most
/// five minutes. A client retry does not wait for it.
pub fn recovery_backoff(interval: Duration, attempts: i32) -> Duration {
    let doubled = interval.saturating_mul(1u32 << attempts.clamp(0, 10));
    doubled.min(Duration::from_secs(300))
}

/// Finishes an operation whose record the caller has just taken over
/// (recovery worker, operator tooling): rebuilds the payment from its row
/// and runs it from the recorded step. Never charges a second time: the
/// provider is asked by key first.
#[instrument(name = "recover an operation", skip_all, fields(tenant = %owned.record.scope.tenant, step = %owned.record.step))]
pub async fn recover(state: &AppState, owned: Owned) -> Result<Answer, EngineError> {
    let record = &owned.record;
    let payment = match &record.payment_id {
        Some(id) => {
            state
                .store
                .payments
                .payment(&record.scope.tenant, id)
                .await?
        }
        None => None,
    };
    let Some(payment) = payment else {
        // Cut off before its payment existed (no payment id yet, or a
        // PostgreSQL claim whose payment row never settled): the provider
        // was never called, so the client's retry may safely run it again.
        let now = state.clock.now();
        state
            .store
            .requests
            .fail_retryable(
                record,
                "RECOVERED_BEFORE_PAYMENT",
                now,
                now.plus(state.config.replay_window),
            )
            .await?;
        return Err(EngineError::Unavailable(anyhow::anyhow!(
            "operation had not created its payment; retry"
        )));
    };
    run(state, owned, &NewPayment::from(payment), true).await
}

/// The record as `finish` left it in the store.
fn finished(record: Record, finish: &Finish) -> Record {
    Record {
        status: finish.status,
        step: Step::Completed,
        response: Some(finish.response.clone()),
        expires_at: Some(finish.expires_at),
        updated_at: finish.now,
        locked_until: finish.now,
        ..record
    }
}

fn update_of(payment: &Payment) -> PaymentUpdate {
    PaymentUpdate {
        id: payment.id.clone(),
        status: payment.status,
        provider_charge_id: payment.provider_charge_id.clone(),
        decline_code: payment.decline_code.clone(),
    }
}

/// The outbox event for a payment's final state (see docs/events.md).
fn event(
    payment_id: &PaymentId,
    event_type: &'static str,
    facts: &NewPayment,
    update: &PaymentUpdate,
) -> OutboxEvent {
    let payload = serde_json::json!({
        "paymentId": payment_id.as_str(),
        "tenantId": facts.tenant.as_str(),
        "accountId": facts.account_id,
        "merchantReference": facts.merchant_reference,
        "amount": facts.amount.to_decimal_string(),
        "currency": facts.amount.currency_code(),
        "amountMinor": facts.amount.minor_units(),
        "status": update.status.as_str(),
        "declineCode": update.decline_code,
    });
    OutboxEvent {
        event_id: format!("evt_{}", uuid::Uuid::now_v7().simple()),
        event_type,
        schema_version: 1,
        aggregate_id: payment_id.to_string(),
        tenant: facts.tenant.clone(),
        payload: payload.to_string(),
        traceparent: once_telemetry::context::current_traceparent(),
    }
}

async fn lost_or_failed(
    state: &AppState,
    record: &Record,
    e: StoreError,
) -> Result<Answer, EngineError> {
    match e {
        StoreError::Fenced => answer_after_losing(state, record).await,
        other => Err(other.into()),
    }
}

/// We were fenced out mid-operation: whoever took over owns the answer.
/// Replay it if it is there already; otherwise the client retries.
async fn answer_after_losing(state: &AppState, record: &Record) -> Result<Answer, EngineError> {
    warn!(
        fence = record.fence,
        "fenced out by a newer owner; not writing"
    );
    match state.store.requests.load(&record.scope).await? {
        Some(current) if current.status.is_replayable() && current.response.is_some() => {
            replay(state, current)
        }
        Some(current) => Err(EngineError::InProgress {
            retry_after: state.clock.now().until(current.locked_until),
        }),
        None => Err(EngineError::Internal(anyhow::anyhow!(
            "record vanished while fenced out"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_backs_off_by_doubling_up_to_five_minutes() {
        let second = Duration::from_secs(1);
        assert_eq!(recovery_backoff(second, 0), second);
        assert_eq!(recovery_backoff(second, 3), Duration::from_secs(8));
        assert_eq!(recovery_backoff(second, 40), Duration::from_secs(300));
        assert_eq!(recovery_backoff(second, -1), second);
    }
}
