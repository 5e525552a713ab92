//! The two hot writes, many at once: the claims (or the finishes) of one
//! PostgreSQL batch as one statement, a row each (decision 0068).
//!
//! `hot_writes.rs` holds the one-row forms; these do the same writes under
//! the same conditions, row by row, so that each row is refused or written
//! on its own: a claim whose key is taken writes nothing for its row, a
//! finish whose fence is lost writes nothing for its row, and the other
//! rows of the statement are written. The rows travel as one `jsonb`
//! parameter (`jsonb_to_recordset`): one prepared statement whatever the
//! batch's size, and sqlx's `Any` driver binds no arrays. Stored answers,
//! bytes, travel as hex.
//!
//! Each statement inserts in key order, so two batches that claim the same
//! keys (a client's retries, spread over two writers) wait on each other in
//! the same order instead of deadlocking.
//!
//! Both statements cap their rows with a `LIMIT` that is a parameter
//! ([`limit`]): what keeps PostgreSQL's cached plan on the primary keys.
//!
//! PostgreSQL only: SQLite's batches write one row per statement
//! (`hot_writes.rs`), where a statement costs no round trip.

use std::collections::HashMap;

use serde::Serialize;
use sqlx::{AnyConnection, Row};

use super::hot_writes::ClaimWrite;
use super::records::{CLAIMED_AT, unavailable};
use crate::idempotency::record::{Scope, Status};
use crate::payments::model::PaymentStatus;
use crate::store::{Claim, Finish, StoreError};
use once_store_client::command::Sealed;

const CLAIMS: &str = "WITH input AS ( \
       SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(tenant_id text, principal_id text, operation text, \
         idempotency_key text, fingerprint text, fingerprint_version bigint, step text, locked_until bigint, \
         payment_id text, provider_key text, trace_id text, region text, now bigint, account_id text, \
         merchant_reference text, amount_minor bigint, currency text, channel text) LIMIT $4 \
     ), rec AS ( \
       INSERT INTO idempotency_requests (tenant_id, principal_id, operation, idempotency_key, fingerprint, \
         fingerprint_version, status, step, fence, locked_until, payment_id, provider_key, trace_id, region, \
         takeovers, created_at, updated_at) \
       SELECT tenant_id, principal_id, operation, idempotency_key, fingerprint, fingerprint_version, $2, step, 1, \
         locked_until, payment_id, provider_key, trace_id, region, 0, now, now FROM input \
       ORDER BY tenant_id, principal_id, operation, idempotency_key \
       ON CONFLICT DO NOTHING RETURNING payment_id \
     ), pay AS ( \
       INSERT INTO payments (id, tenant_id, account_id, merchant_reference, amount_minor, currency, channel, \
         status, provider_key, region, created_at, updated_at) \
       SELECT payment_id, tenant_id, account_id, merchant_reference, amount_minor, currency, channel, $3, \
         provider_key, region, now, now FROM input WHERE payment_id IN (SELECT payment_id FROM rec) \
       ORDER BY tenant_id, account_id, merchant_reference \
       ON CONFLICT (tenant_id, account_id, merchant_reference) DO NOTHING RETURNING id \
     ) \
     SELECT payment_id AS id, 'claimed' AS wrote FROM rec UNION ALL SELECT id, 'created' FROM pay";

const FINISHES: &str = concat!(
    "WITH input AS ( \
       SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(n bigint, tenant_id text, principal_id text, \
         operation text, idempotency_key text, fence bigint, status text, answer text, sealed_with text, \
         now bigint, expires_at bigint, payment_status text, charge_id text, decline_code text, \
         payment_id text, event_id text, event_type text, schema_version bigint, aggregate_id text, \
         payload text, traceparent text) LIMIT $2 \
     ), rec AS ( \
       UPDATE idempotency_requests r SET status = x.status, step = 'COMPLETED', \
         response_sealed = decode(x.answer, 'hex'), sealed_with = x.sealed_with, error_code = NULL, \
         updated_at = x.now, expires_at = x.expires_at, locked_until = x.now \
       FROM input x \
       WHERE r.tenant_id = x.tenant_id AND r.principal_id = x.principal_id AND r.operation = x.operation \
         AND r.idempotency_key = x.idempotency_key AND r.fence = x.fence AND ",
    on_the_keyed_row!(unfinished!("r.")),
    " RETURNING x.n \
     ), pay AS ( \
       UPDATE payments p SET status = x.payment_status, provider_charge_id = x.charge_id, \
         decline_code = x.decline_code, updated_at = x.now \
       FROM input x WHERE p.id = x.payment_id AND x.n IN (SELECT n FROM rec) RETURNING x.n \
     ), evt AS ( \
       INSERT INTO outbox (event_id, event_type, schema_version, aggregate_id, tenant_id, payload, created_at, \
         traceparent) \
       SELECT event_id, event_type, schema_version, aggregate_id, tenant_id, payload, now, traceparent \
       FROM input WHERE event_id IS NOT NULL AND n IN (SELECT n FROM rec) ORDER BY n \
       RETURNING 1 \
     ) \
     SELECT n, 'owned' AS wrote FROM rec UNION ALL SELECT n, 'paid' FROM pay"
);

/// The finishes of a batch, each finding its record by key
/// ([`crate::sql::keyed_writes`]).
pub fn keyed_write() -> once_db::RoundQuery {
    once_db::RoundQuery::new("gathered finishes", FINISHES, "idempotency_requests_pkey")
}

/// One claim's row, as the statement's `jsonb_to_recordset` reads it.
#[derive(Serialize)]
struct ClaimRow<'a> {
    tenant_id: &'a str,
    principal_id: &'a str,
    operation: &'a str,
    idempotency_key: &'a str,
    fingerprint: &'a str,
    fingerprint_version: i32,
    step: &'a str,
    locked_until: i64,
    payment_id: &'a str,
    provider_key: String,
    trace_id: Option<&'a str>,
    region: &'a str,
    now: i64,
    account_id: &'a str,
    merchant_reference: &'a str,
    amount_minor: i64,
    currency: &'a str,
    channel: &'a str,
}

impl<'a> ClaimRow<'a> {
    fn of(claim: &'a Claim) -> Self {
        let p = &claim.payment;
        Self {
            tenant_id: claim.scope.tenant.as_str(),
            principal_id: claim.scope.principal.as_str(),
            operation: claim.scope.operation,
            idempotency_key: claim.scope.key.as_str(),
            fingerprint: &claim.fingerprint.hash,
            fingerprint_version: claim.fingerprint.version,
            step: CLAIMED_AT.as_str(),
            locked_until: claim.now.plus(claim.lease).0,
            payment_id: p.id.as_str(),
            provider_key: p.id.provider_key(),
            trace_id: claim.trace_id.as_deref(),
            region: &claim.region,
            now: claim.now.0,
            account_id: &p.account_id,
            merchant_reference: &p.merchant_reference,
            amount_minor: p.amount.minor_units(),
            currency: p.amount.currency_code(),
            channel: p.channel.as_str(),
        }
    }
}

/// What each claim did, in the order given. Every claim carries a fresh
/// payment id, which is how its row's writes are told apart.
pub async fn claims(
    conn: &mut AnyConnection,
    claims: &[Claim],
) -> Result<Vec<ClaimWrite>, StoreError> {
    let rows: Vec<ClaimRow> = claims.iter().map(ClaimRow::of).collect();
    let rows = sqlx::query(CLAIMS)
        .bind(json(&rows)?)
        .bind(Status::InProgress.as_str())
        .bind(PaymentStatus::Pending.as_str())
        .bind(limit(claims.len()))
        .fetch_all(&mut *conn)
        .await
        .map_err(unavailable)?;
    let mut wrote: HashMap<String, ClaimWrite> = HashMap::with_capacity(claims.len());
    for row in rows {
        let id: String = row.try_get("id").map_err(unavailable)?;
        let what: String = row.try_get("wrote").map_err(unavailable)?;
        let write = wrote.entry(id).or_default();
        match what.as_str() {
            "claimed" => write.claimed = true,
            _ => write.payment_created = true,
        }
    }
    Ok(claims
        .iter()
        .map(|c| {
            wrote
                .get(c.payment.id.as_str())
                .copied()
                .unwrap_or_default()
        })
        .collect())
}

/// One finish: the record it completes (its scope and its owner's fence),
/// what it writes, and the answer sealed for the record.
#[derive(Debug, Clone)]
pub struct FinishRow {
    pub scope: Scope,
    pub fence: i64,
    pub finish: Finish,
    pub answer: Sealed,
}

/// One finish's row, as the statement's `jsonb_to_recordset` reads it.
#[derive(Serialize)]
struct FinishJson<'a> {
    n: usize,
    tenant_id: &'a str,
    principal_id: &'a str,
    operation: &'a str,
    idempotency_key: &'a str,
    fence: i64,
    status: &'a str,
    answer: String,
    sealed_with: Option<&'a str>,
    now: i64,
    expires_at: i64,
    payment_status: Option<&'a str>,
    charge_id: Option<&'a str>,
    decline_code: Option<&'a str>,
    payment_id: Option<&'a str>,
    event_id: Option<&'a str>,
    event_type: Option<&'a str>,
    schema_version: Option<i32>,
    aggregate_id: Option<&'a str>,
    payload: Option<&'a str>,
    traceparent: Option<&'a str>,
}

impl<'a> FinishJson<'a> {
    fn of(n: usize, row: &'a FinishRow) -> Self {
        let (scope, finish) = (&row.scope, &row.finish);
        let payment = finish.payment.as_ref();
        let event = finish.event.as_ref();
        Self {
            n,
            tenant_id: scope.tenant.as_str(),
            principal_id: scope.principal.as_str(),
            operation: scope.operation,
            idempotency_key: scope.key.as_str(),
            fence: row.fence,
            status: finish.status.as_str(),
            answer: hex::encode(&row.answer.0),
            sealed_with: row.answer.key_id(),
            now: finish.now.0,
            expires_at: finish.expires_at.0,
            payment_status: payment.map(|p| p.status.as_str()),
            charge_id: payment.and_then(|p| p.provider_charge_id.as_deref()),
            decline_code: payment.and_then(|p| p.decline_code.as_deref()),
            payment_id: payment.map(|p| p.id.as_str()),
            event_id: event.map(|e| e.event_id.as_str()),
            event_type: event.map(|e| e.event_type),
            schema_version: event.map(|e| e.schema_version),
            aggregate_id: event.map(|e| e.aggregate_id.as_str()),
            payload: event.map(|e| e.payload.as_str()),
            traceparent: event.and_then(|e| e.traceparent.as_deref()),
        }
    }
}

/// Each finish's outcome, in the order given: done, or
/// [`StoreError::Fenced`] with nothing written for its row when its
/// record has a newer owner. An error for the whole statement otherwise.
pub async fn finishes(
    conn: &mut AnyConnection,
    finishes: &[FinishRow],
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let rows: Vec<FinishJson> = finishes
        .iter()
        .enumerate()
        .map(|(n, row)| FinishJson::of(n, row))
        .collect();
    let rows = sqlx::query(FINISHES)
        .bind(json(&rows)?)
        .bind(limit(finishes.len()))
        .fetch_all(&mut *conn)
        .await
        .map_err(unavailable)?;
    let (mut owned, mut paid) = (vec![false; finishes.len()], vec![false; finishes.len()]);
    for row in rows {
        let n: i64 = row.try_get("n").map_err(unavailable)?;
        let what: String = row.try_get("wrote").map_err(unavailable)?;
        let n = usize::try_from(n)
            .ok()
            .filter(|n| *n < finishes.len())
            .ok_or_else(|| StoreError::Corrupt(format!("a finish returned row {n}")))?;
        match what.as_str() {
            "owned" => owned[n] = true,
            _ => paid[n] = true,
        }
    }
    finishes
        .iter()
        .enumerate()
        .map(|(n, row)| {
            if owned[n] && row.finish.payment.is_some() && !paid[n] {
                // As in the one-row form: cannot happen while the claim
                // creates the payment with the record. Failing the
                // statement as a whole rolls the record's write back.
                return Err(StoreError::Corrupt(
                    "completed a record whose payment row is missing".into(),
                ));
            }
            Ok(if owned[n] {
                Ok(())
            } else {
                Err(StoreError::Fenced)
            })
        })
        .collect()
}

/// The `LIMIT` on a statement's rows: all of them. It tells the planner
/// how few rows a batch has. Without it, a cached generic plan assumes the
/// hundred rows PostgreSQL guesses for any set-returning function, and
/// finds the records to finish by scanning an index of every unfinished
/// record (2.1 ms a statement, measured) instead of looking each up by its
/// key; with a limit that is a parameter, it assumes ten.
fn limit(rows: usize) -> i64 {
    i64::try_from(rows).unwrap_or(i64::MAX)
}

fn json(rows: &impl Serialize) -> Result<String, StoreError> {
    serde_json::to_string(rows)
        .map_err(|e| StoreError::Corrupt(format!("a batch's rows as JSON: {e}")))
}
