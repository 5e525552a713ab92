//! Queries on `payments`.

use sqlx::{Any, Executor, Row};

use super::records::unavailable;
use crate::domain::{Money, PaymentId, TenantId, UnixMillis};
use crate::payments::command::Channel;
use crate::payments::model::{NewPayment, Payment, PaymentStatus, PaymentUpdate, cut_page};
use crate::store::{ListPosition, PaymentFilter, PaymentPage, StoreError};

const COLUMNS: &str = "id, tenant_id, account_id, merchant_reference, amount_minor, currency, channel, status, \
     provider_charge_id, decline_code, region, created_at, updated_at";

/// Inserts a pending payment unless its business key
/// `(tenant, account, merchant reference)` is taken. On PostgreSQL a
/// concurrent insert of the same business key waits for the other
/// transaction and then does nothing, so racing keyless duplicates resolve
/// to exactly one row. The sql mode's: its finish settles the row in the
/// same transaction as the record, so nothing looks for it later.
pub async fn insert_pending<'e>(
    db: impl Executor<'e, Database = Any>,
    payment: &NewPayment,
    now: UnixMillis,
) -> Result<bool, StoreError> {
    insert(db, payment, now, None).await
}

/// [`insert_pending`] for the raft mode, whose row is settled after its
/// record is finished in raft-store: the row is marked unsettled
/// (`settle_after`), so the settling pass finds it if that write never
/// comes ([`pending`]).
pub async fn insert_unsettled<'e>(
    db: impl Executor<'e, Database = Any>,
    payment: &NewPayment,
    now: UnixMillis,
) -> Result<bool, StoreError> {
    insert(db, payment, now, Some(now)).await
}

async fn insert<'e>(
    db: impl Executor<'e, Database = Any>,
    payment: &NewPayment,
    now: UnixMillis,
    settle_after: Option<UnixMillis>,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "INSERT INTO payments (id, tenant_id, account_id, merchant_reference, amount_minor, currency, channel, \
         status, provider_key, region, created_at, updated_at, settle_after) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12) \
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
    .bind(settle_after.map(|at| at.0))
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

/// What [`settle`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The pending row took the update.
    Now,
    /// The row was final already, with this status: a finish applied
    /// before (the raft mode's retries and its settling pass both get here).
    Before(PaymentStatus),
    /// No row with this id.
    Missing,
}

/// Writes a payment's final state, only while its row is pending: a
/// finish applied twice changes nothing the second time, so whoever gets
/// [`Settled::Now`] writes the event. On PostgreSQL a concurrent settle of
/// the same row waits for the first and then finds it final.
pub async fn settle(
    conn: &mut sqlx::AnyConnection,
    update: &PaymentUpdate,
    now: UnixMillis,
) -> Result<Settled, StoreError> {
    let done = sqlx::query(
        "UPDATE payments SET status = $2, provider_charge_id = $3, decline_code = $4, updated_at = $5, \
         settle_after = NULL WHERE id = $1 AND status = $6",
    )
    .bind(update.id.as_str())
    .bind(update.status.as_str())
    .bind(update.provider_charge_id.as_deref())
    .bind(update.decline_code.as_deref())
    .bind(now.0)
    .bind(PaymentStatus::Pending.as_str())
    .execute(&mut *conn)
    .await
    .map_err(unavailable)?;
    if done.rows_affected() == 1 {
        return Ok(Settled::Now);
    }
    let row = sqlx::query("SELECT status FROM payments WHERE id = $1")
        .bind(update.id.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(unavailable)?;
    match row {
        None => Ok(Settled::Missing),
        Some(row) => {
            let status = row.try_get::<String, _>("status").map_err(unavailable)?;
            PaymentStatus::parse(&status)
                .map(Settled::Before)
                .ok_or_else(|| StoreError::Corrupt("payments.status".into()))
        }
    }
}

fn select_pending() -> String {
    format!(
        "SELECT {COLUMNS} FROM payments WHERE settle_after IS NOT NULL AND settle_after < $1 \
         AND (settle_after, id) > ($2, $3) AND status = 'pending' ORDER BY settle_after, id LIMIT $4"
    )
}

/// The settling pass's round query (the raft mode's recovery worker).
pub fn round_queries() -> Vec<once_db::RoundQuery> {
    vec![once_db::RoundQuery::new(
        "settling round",
        select_pending(),
        "payments_unsettled",
    )]
}

/// Pending payments created before `before`, oldest first, strictly after
/// `after`: a keyset query on `payments_unsettled` (a partial index on
/// `settle_after`, which the raft mode's [`insert_unsettled`] sets to the
/// creation time and [`settle`] clears, so the query reads only unsettled
/// rows however many payments there are; the sql mode never sets it, and
/// its finish changes no indexed column — decision 0060).
pub async fn pending<'e>(
    db: impl Executor<'e, Database = Any>,
    before: UnixMillis,
    after: Option<&ListPosition>,
    limit: i64,
) -> Result<Vec<Payment>, StoreError> {
    let (from_at, from_id) = after.map_or((i64::MIN, ""), |p| (p.created_at.0, p.id.as_str()));
    let rows = sqlx::query(&select_pending())
        .bind(before.0)
        .bind(from_at)
        .bind(from_id)
        .bind(limit)
        .fetch_all(db)
        .await
        .map_err(unavailable)?;
    rows.iter().map(payment_of_row).collect()
}

/// A tenant's payment; another tenant's id reads as absent (I7).
pub async fn select<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant: &TenantId,
    id: &PaymentId,
) -> Result<Option<Payment>, StoreError> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM payments WHERE id = $1 AND tenant_id = $2"
    ))
    .bind(id.as_str())
    .bind(tenant.as_str())
    .fetch_optional(db)
    .await
    .map_err(unavailable)?;
    row.as_ref().map(payment_of_row).transpose()
}

/// A page of a tenant's payments in `(created_at, id)` order, strictly
/// after `after`: a keyset query on `payments_tenant_created` (or
/// `payments_tenant_account_created` with an account), reading `limit + 1`
/// rows to learn whether another page follows.
pub async fn list<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant: &TenantId,
    filter: &PaymentFilter,
    after: Option<&ListPosition>,
    limit: u32,
) -> Result<PaymentPage, StoreError> {
    // Conditions are added only when present: PostgreSQL cannot type a
    // parameter that is only ever compared with NULL.
    let mut sql = format!("SELECT {COLUMNS} FROM payments WHERE tenant_id = $1");
    let mut n = 1;
    let mut next_param = || {
        n += 1;
        n
    };
    if filter.account_id.is_some() {
        sql.push_str(&format!(" AND account_id = ${}", next_param()));
    }
    if filter.merchant_reference.is_some() {
        sql.push_str(&format!(" AND merchant_reference = ${}", next_param()));
    }
    if after.is_some() {
        let (at, id) = (next_param(), next_param());
        sql.push_str(&format!(" AND (created_at, id) > (${at}, ${id})"));
    }
    sql.push_str(&format!(" ORDER BY created_at, id LIMIT ${}", next_param()));
    let mut query = sqlx::query(&sql).bind(tenant.as_str());
    if let Some(account) = &filter.account_id {
        query = query.bind(account.as_str());
    }
    if let Some(reference) = &filter.merchant_reference {
        query = query.bind(reference.as_str());
    }
    if let Some(after) = after {
        query = query.bind(after.created_at.0).bind(after.id.as_str());
    }
    let rows = query
        .bind(i64::from(limit) + 1)
        .fetch_all(db)
        .await
        .map_err(unavailable)?;
    let mut payments = rows
        .iter()
        .map(payment_of_row)
        .collect::<Result<Vec<_>, _>>()?;
    let next = cut_page(&mut payments, limit)
        .then(|| payments.last())
        .flatten()
        .map(|last| ListPosition {
            created_at: last.created_at,
            id: last.id.clone(),
        });
    Ok(PaymentPage { payments, next })
}

fn payment_of_row(row: &sqlx::any::AnyRow) -> Result<Payment, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("payments.{what}"));
    let s = |c: &str| row.try_get::<String, _>(c).map_err(unavailable);
    let o = |c: &str| row.try_get::<Option<String>, _>(c).map_err(unavailable);
    let i = |c: &str| row.try_get::<i64, _>(c).map_err(unavailable);
    Ok(Payment {
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
    })
}
