//! PostgreSQL forms of the two hot writes, each one statement instead of a
//! multi-statement transaction: a claim (record + pending payment) and a
//! finish (record + payment + outbox row). Data-modifying CTEs run in one
//! snapshot and commit atomically, so the guarantees are those of the
//! transaction they replace, at a third of the round trips. SQLite has no
//! data-modifying CTEs, and being in-process it has no round trips to save:
//! it keeps the transactional forms (`finish.rs`, `store.rs`).

use sqlx::{Any, Executor, Row};

use once_store_client::command::Sealed;

use super::records::unavailable;
use crate::idempotency::record::{Scope, Status};
use crate::payments::model::PaymentStatus;
use crate::store::{Claim, Finish, StoreError};

/// What one claim statement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimWrite {
    pub claimed: bool,
    pub payment_created: bool,
}

pub async fn claim<'e>(
    db: impl Executor<'e, Database = Any>,
    claim: &Claim,
) -> Result<ClaimWrite, StoreError> {
    let p = &claim.payment;
    let row = sqlx::query(
        "WITH rec AS ( \
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
         SELECT (SELECT COUNT(*) FROM rec) AS claimed, (SELECT COUNT(*) FROM pay) AS created",
    )
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
    .fetch_one(db)
    .await
    .map_err(unavailable)?;
    let claimed: i64 = row.try_get("claimed").map_err(unavailable)?;
    let created: i64 = row.try_get("created").map_err(unavailable)?;
    Ok(ClaimWrite {
        claimed: claimed == 1,
        payment_created: created == 1,
    })
}

/// [`StoreError::Fenced`] when the fence no longer matched: then nothing
/// at all was written.
pub async fn finish<'e>(
    db: impl Executor<'e, Database = Any>,
    scope: &Scope,
    fence: i64,
    finish: &Finish,
    answer: &Sealed,
) -> Result<(), StoreError> {
    let payment = finish.payment.as_ref();
    let event = finish.event.as_ref();
    let row = sqlx::query(
        "WITH rec AS ( \
           UPDATE idempotency_requests SET status = $6, step = 'COMPLETED', response_sealed = $7, \
             sealed_with = $8, error_code = NULL, \
             updated_at = $9, expires_at = $10, locked_until = $9 \
           WHERE tenant_id = $1 AND principal_id = $2 AND operation = $3 AND idempotency_key = $4 \
             AND fence = $5 AND status IN ('IN_PROGRESS', 'UNKNOWN_REQUIRES_RECOVERY') \
           RETURNING 1 \
         ), pay AS ( \
           UPDATE payments SET status = $11, provider_charge_id = $12, decline_code = $13, updated_at = $9 \
           WHERE id = $14 AND EXISTS (SELECT 1 FROM rec) RETURNING 1 \
         ), evt AS ( \
           INSERT INTO outbox (event_id, event_type, schema_version, aggregate_id, tenant_id, payload, created_at, \
             traceparent) \
           SELECT $15, $16, $17, $18, $1, $19, $9, $20 WHERE $15 IS NOT NULL AND EXISTS (SELECT 1 FROM rec) \
           RETURNING 1 \
         ) \
         SELECT (SELECT COUNT(*) FROM rec) AS owned, (SELECT COUNT(*) FROM pay) AS paid",
    )
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
    .fetch_one(db)
    .await
    .map_err(unavailable)?;
    let owned: i64 = row.try_get("owned").map_err(unavailable)?;
    let paid: i64 = row.try_get("paid").map_err(unavailable)?;
    if owned == 1 && payment.is_some() && paid != 1 {
        // Cannot happen while the claim creates the payment with the record;
        // say so loudly if it ever does.
        return Err(StoreError::Corrupt(
            "completed a record whose payment row is missing".into(),
        ));
    }
    if owned == 1 {
        Ok(())
    } else {
        Err(StoreError::Fenced)
    }
}
