//! The two hot writes, each one trip to the database: a claim (record +
//! pending payment) and a finish (record + payment + outbox row).
//!
//! - PostgreSQL: one statement of data-modifying CTEs, which run in one
//!   snapshot and commit atomically, so the guarantees are those of the
//!   transaction they replace, at a third of the round trips (decision 0006).
//! - SQLite: the same writes as several statements sent as one query. SQLite
//!   has no network round trip to save, but sqlx runs each query on its
//!   connection's own thread, and every query is a hand-off to that thread
//!   and back; one query instead of two or three is what a batch's writer
//!   waits on (decision 0039). The statements share one list of bound
//!   values; `RETURNING` rows say which of them wrote.
//!
//! On PostgreSQL the request path gathers a batch's claims, and its
//! finishes, into one statement each (`gathered_writes.rs`, decision 0068);
//! there these one-row forms serve an operator's resolution.
//!
//! Both run inside the caller's transaction (a group commit batch, or the
//! transaction of an operator's resolution), which rolls back when they
//! return an error. In a batch each is a one-trip job: on SQLite its query
//! leads with the batch's savepoint move (`savepoint_move`,
//! `once_db::group_commit`), so the move costs no hand-off of its own.

use std::borrow::Cow;

use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};

use once_db::Dialect;
use once_store_client::command::Sealed;

use super::records::unavailable;
use crate::idempotency::record::{Scope, Status};
use crate::payments::model::PaymentStatus;
use crate::store::{Claim, Finish, StoreError};

const CLAIM_POSTGRES: &str = "WITH rec AS ( \
       INSERT INTO idempotency_requests (tenant_id, principal_id, operation, idempotency_key, fingerprint, \
         fingerprint_version, status, step, fence, locked_until, payment_id, provider_key, trace_id, region, \
         takeovers, created_at, updated_at) \
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, $9, $10, $11, $12, $13, 0, $14, $14) \
       ON CONFLICT DO NOTHING RETURNING 1 \
     ), pay AS ( \
       INSERT INTO payments (id, tenant_id, account_id, merchant_reference, amount_minor, currency, channel, \
         status, provider_key, region, created_at, updated_at) \
       SELECT $10, $1, $15, $16, $17, $18, $19, $20, $11, $13, $14, $14 WHERE EXISTS (SELECT 1 FROM rec) \
       ON CONFLICT (tenant_id, account_id, merchant_reference) DO NOTHING RETURNING 1 \
     ) \
     SELECT 'claimed' AS wrote FROM rec UNION ALL SELECT 'created' FROM pay";

/// The payment is created only if the record naming it (a fresh id) was
/// inserted by the statement before.
const CLAIM_SQLITE: &str = "INSERT INTO idempotency_requests (tenant_id, principal_id, operation, idempotency_key, \
       fingerprint, fingerprint_version, status, step, fence, locked_until, payment_id, provider_key, trace_id, \
       region, takeovers, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, $9, $10, $11, $12, $13, 0, $14, $14) \
     ON CONFLICT DO NOTHING RETURNING 'claimed' AS wrote; \
     INSERT INTO payments (id, tenant_id, account_id, merchant_reference, amount_minor, currency, channel, \
       status, provider_key, region, created_at, updated_at) \
     SELECT $10, $1, $15, $16, $17, $18, $19, $20, $11, $13, $14, $14 \
     WHERE EXISTS (SELECT 1 FROM idempotency_requests WHERE tenant_id = $1 AND principal_id = $2 \
       AND operation = $3 AND idempotency_key = $4 AND payment_id = $10) \
     ON CONFLICT (tenant_id, account_id, merchant_reference) DO NOTHING RETURNING 'created' AS wrote";

const FINISH_POSTGRES: &str = concat!(
    "WITH rec AS ( \
       UPDATE idempotency_requests SET status = $6, step = 'COMPLETED', response_sealed = $7, \
         sealed_with = $8, error_code = NULL, \
         updated_at = $9, expires_at = $10, locked_until = $9 \
       WHERE tenant_id = $1 AND principal_id = $2 AND operation = $3 AND idempotency_key = $4 \
         AND fence = $5 AND ",
    on_the_keyed_row!(unfinished!()),
    " RETURNING 1 \
     ), pay AS ( \
       UPDATE payments SET status = $11, provider_charge_id = $12, decline_code = $13, updated_at = $9 \
       WHERE id = $14 AND EXISTS (SELECT 1 FROM rec) RETURNING 1 \
     ), evt AS ( \
       INSERT INTO outbox (event_id, event_type, schema_version, aggregate_id, tenant_id, payload, created_at, \
         traceparent) \
       SELECT $15, $16, $17, $18, $1, $19, $9, $20 WHERE $15::text IS NOT NULL AND EXISTS (SELECT 1 FROM rec) \
       RETURNING 1 \
     ) \
     SELECT 'owned' AS wrote FROM rec UNION ALL SELECT 'paid' FROM pay"
);

/// Unlike the CTE, the payment and the event are written even when the
/// record's fence no longer matched; the error that follows rolls them back
/// with the caller's transaction.
const FINISH_SQLITE: &str = concat!(
    "UPDATE idempotency_requests SET status = $6, step = 'COMPLETED', response_sealed = $7, \
       sealed_with = $8, error_code = NULL, updated_at = $9, expires_at = $10, locked_until = $9 \
     WHERE tenant_id = $1 AND principal_id = $2 AND operation = $3 AND idempotency_key = $4 \
       AND fence = $5 AND ",
    on_the_keyed_row!(unfinished!()),
    " RETURNING 'owned' AS wrote; \
     UPDATE payments SET status = $11, provider_charge_id = $12, decline_code = $13, updated_at = $9 \
     WHERE id = $14 RETURNING 'paid' AS wrote; \
     INSERT INTO outbox (event_id, event_type, schema_version, aggregate_id, tenant_id, payload, created_at, \
       traceparent) \
     SELECT $15, $16, $17, $18, $1, $19, $9, $20 WHERE $15 IS NOT NULL"
);

/// The one-row finish, PostgreSQL's form ([`crate::sql::keyed_writes`]; a
/// plan is asked of one statement, and SQLite's form is three).
pub fn keyed_write() -> once_db::RoundQuery {
    once_db::RoundQuery::new(
        "one-row finish",
        FINISH_POSTGRES,
        "idempotency_requests_pkey",
    )
}

/// The dialect's query, behind the savepoint move on SQLite. (PostgreSQL
/// runs one statement per query: its batches move the savepoint themselves
/// and hand over an empty move.)
fn behind(
    savepoint_move: &'static str,
    dialect: Dialect,
    postgres: &'static str,
    sqlite: &'static str,
) -> Cow<'static, str> {
    match dialect {
        Dialect::Postgres => {
            debug_assert!(
                savepoint_move.is_empty(),
                "PostgreSQL moves its own savepoints"
            );
            Cow::Borrowed(postgres)
        }
        Dialect::Sqlite if savepoint_move.is_empty() => Cow::Borrowed(sqlite),
        Dialect::Sqlite => Cow::Owned(format!("{savepoint_move}{sqlite}")),
    }
}

/// Which of its writes a hot write's query made: the `wrote` column of the
/// rows it returned.
fn wrote(rows: &[AnyRow], what: &str) -> Result<bool, StoreError> {
    for row in rows {
        let wrote: String = row.try_get("wrote").map_err(unavailable)?;
        if wrote == what {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What one claim did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClaimWrite {
    pub claimed: bool,
    pub payment_created: bool,
}

/// Claims the record and creates its payment; on SQLite, `savepoint_move`
/// runs first (empty outside a batch).
pub async fn claim<'e>(
    db: impl Executor<'e, Database = Any>,
    dialect: Dialect,
    savepoint_move: &'static str,
    claim: &Claim,
) -> Result<ClaimWrite, StoreError> {
    let p = &claim.payment;
    let sql = behind(savepoint_move, dialect, CLAIM_POSTGRES, CLAIM_SQLITE);
    let rows = sqlx::query(&sql)
        .bind(claim.scope.tenant.as_str())
        .bind(claim.scope.principal.as_str())
        .bind(claim.scope.operation)
        .bind(claim.scope.key.as_str())
        .bind(&claim.fingerprint.hash)
        .bind(i64::from(claim.fingerprint.version))
        .bind(Status::InProgress.as_str())
        .bind(super::records::CLAIMED_AT.as_str())
        .bind(claim.now.plus(claim.lease).0)
        .bind(p.id.as_str())
        .bind(p.id.provider_key())
        .bind(claim.trace_id.as_deref())
        .bind(&claim.region)
        .bind(claim.now.0)
        .bind(&p.account_id)
        .bind(&p.merchant_reference)
        .bind(p.amount.minor_units())
        .bind(p.amount.currency_code())
        .bind(p.channel.as_str())
        .bind(PaymentStatus::Pending.as_str())
        .fetch_all(db)
        .await
        .map_err(unavailable)?;
    Ok(ClaimWrite {
        claimed: wrote(&rows, "claimed")?,
        payment_created: wrote(&rows, "created")?,
    })
}

/// [`StoreError::Fenced`] when the fence no longer matched: then nothing
/// stays written (PostgreSQL writes nothing; SQLite's writes roll back with
/// the caller's transaction).
/// On SQLite, `savepoint_move` runs first (empty outside a batch).
pub async fn finish<'e>(
    db: impl Executor<'e, Database = Any>,
    dialect: Dialect,
    savepoint_move: &'static str,
    scope: &Scope,
    fence: i64,
    finish: &Finish,
    answer: &Sealed,
) -> Result<(), StoreError> {
    let payment = finish.payment.as_ref();
    let event = finish.event.as_ref();
    let sql = behind(savepoint_move, dialect, FINISH_POSTGRES, FINISH_SQLITE);
    let rows = sqlx::query(&sql)
        .bind(scope.tenant.as_str())
        .bind(scope.principal.as_str())
        .bind(scope.operation)
        .bind(scope.key.as_str())
        .bind(fence)
        .bind(finish.status.as_str())
        .bind(answer.0.clone())
        .bind(answer.key_id().map(str::to_owned))
        .bind(finish.now.0)
        .bind(finish.expires_at.0)
        .bind(payment.map(|p| p.status.as_str()))
        .bind(payment.and_then(|p| p.provider_charge_id.clone()))
        .bind(payment.and_then(|p| p.decline_code.clone()))
        .bind(payment.map(|p| p.id.to_string()))
        .bind(event.map(|e| e.event_id.clone()))
        .bind(event.map(|e| e.event_type))
        .bind(event.map(|e| i64::from(e.schema_version)))
        .bind(event.map(|e| e.aggregate_id.clone()))
        .bind(event.map(|e| e.payload.clone()))
        .bind(event.and_then(|e| e.traceparent.clone()))
        .fetch_all(db)
        .await
        .map_err(unavailable)?;
    let (owned, paid) = (wrote(&rows, "owned")?, wrote(&rows, "paid")?);
    if owned && payment.is_some() && !paid {
        // Cannot happen while the claim creates the payment with the record;
        // say so loudly if it ever does.
        return Err(StoreError::Corrupt(
            "completed a record whose payment row is missing".into(),
        ));
    }
    if owned {
        Ok(())
    } else {
        Err(StoreError::Fenced)
    }
}
