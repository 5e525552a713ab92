//! Queries on `payments`.

use sqlx::{Any, Executor, Row};

use super::records::unavailable;
use crate::domain::{Money, PaymentId, TenantId, UnixMillis};
use crate::payments::command::Channel;
use crate::payments::model::{NewPayment, Payment, PaymentStatus, PaymentUpdate};
use crate::store::StoreError;

/// Inserts a pending payment unless its business key
/// `(tenant, account, merchant reference)` is taken. On PostgreSQL a
/// concurrent insert of the same business key waits for the other
/// transaction and then does nothing, so racing keyless duplicates resolve
/// to exactly one row.
pub async fn insert_pending<'e>(
    db: impl Executor<'e, Database = Any>,
    payment: &NewPayment,
    now: UnixMillis,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "INSERT INTO payments (id, tenant_id, account_id, merchant_reference, amount_minor, currency, channel, \
         status, provider_key, region, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11) \
         ON CONFLICT (tenant_id, account_id, merchant_reference) DO NOTHING",
    )
    .bind(payment.id.as_str())
    .bind(payment.tenant.as_str())
    .bind(&payment.account_id)
    .bind(&payment.merchant_reference)
    .bind(payment.amount.minor_units())
    .bind(payment.amount.currency_code())
    .bind(payment.channel.as_str())
    .bind(PaymentStatus::Pending.as_str())
    .bind(payment.id.provider_key())
    .bind(&payment.region)
    .bind(now.0)
    .execute(db)
    .await
    .map_err(unavailable)?;
    Ok(done.rows_affected() == 1)
}

pub async fn id_by_business_key<'e>(
    db: impl Executor<'e, Database = Any>,
    payment: &NewPayment,
) -> Result<Option<PaymentId>, StoreError> {
    let row = sqlx::query("SELECT id FROM payments WHERE tenant_id = $1 AND account_id = $2 AND merchant_reference = $3")
        .bind(payment.tenant.as_str())
        .bind(&payment.account_id)
        .bind(&payment.merchant_reference)
        .fetch_optional(db)
        .await
        .map_err(unavailable)?;
    row.map(|r| {
        r.try_get::<String, _>("id")
            .map(PaymentId::from_trusted)
            .map_err(unavailable)
    })
    .transpose()
}

pub async fn exists<'e>(
    db: impl Executor<'e, Database = Any>,
    id: &PaymentId,
) -> Result<bool, StoreError> {
    let row = sqlx::query("SELECT COUNT(*) AS n FROM payments WHERE id = $1")
        .bind(id.as_str())
        .fetch_one(db)
        .await
        .map_err(unavailable)?;
    Ok(row.try_get::<i64, _>("n").map_err(unavailable)? == 1)
}

pub async fn apply_update<'e>(
    db: impl Executor<'e, Database = Any>,
    update: &PaymentUpdate,
    now: UnixMillis,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE payments SET status = $2, provider_charge_id = $3, decline_code = $4, updated_at = $5 WHERE id = $1",
    )
    .bind(update.id.as_str())
    .bind(update.status.as_str())
    .bind(update.provider_charge_id.as_deref())
    .bind(update.decline_code.as_deref())
    .bind(now.0)
    .execute(db)
    .await
    .map_err(unavailable)?;
    Ok(done.rows_affected() == 1)
}

/// A tenant's payment; another tenant's id reads as absent (I7).
pub async fn select<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant: &TenantId,
    id: &PaymentId,
) -> Result<Option<Payment>, StoreError> {
    let row = sqlx::query(
        "SELECT id, tenant_id, account_id, merchant_reference, amount_minor, currency, channel, status, \
         provider_charge_id, decline_code, region, created_at, updated_at \
         FROM payments WHERE id = $1 AND tenant_id = $2",
    )
    .bind(id.as_str())
    .bind(tenant.as_str())
    .fetch_optional(db)
    .await
    .map_err(unavailable)?;
    let Some(row) = row else { return Ok(None) };
    let corrupt = |what: &str| StoreError::Corrupt(format!("payments.{what}"));
    let s = |c: &str| row.try_get::<String, _>(c).map_err(unavailable);
    let o = |c: &str| row.try_get::<Option<String>, _>(c).map_err(unavailable);
    let i = |c: &str| row.try_get::<i64, _>(c).map_err(unavailable);
    Ok(Some(Payment {
        id: PaymentId::from_trusted(s("id")?),
        tenant: TenantId::parse(&s("tenant_id")?).ok_or_else(|| corrupt("tenant_id"))?,
        account_id: s("account_id")?,
        merchant_reference: s("merchant_reference")?,
        amount: Money::from_minor(i("amount_minor")?, &s("currency")?)
            .map_err(|_| corrupt("currency"))?,
        channel: Channel::parse(&s("channel")?).ok_or_else(|| corrupt("channel"))?,
        status: PaymentStatus::parse(&s("status")?).ok_or_else(|| corrupt("status"))?,
        provider_charge_id: o("provider_charge_id")?,
        decline_code: o("decline_code")?,
        region: s("region")?,
        created_at: UnixMillis(i("created_at")?),
        updated_at: UnixMillis(i("updated_at")?),
    }))
}
