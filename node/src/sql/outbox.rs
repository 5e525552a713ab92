//! Queries on `outbox`: rows are appended in the payment's transaction and
//! read by the publisher in `seq` order.

use sqlx::{Any, Executor};

use super::records::unavailable;
use crate::domain::UnixMillis;
use crate::payments::model::OutboxEvent;
use crate::store::StoreError;

pub async fn append<'e>(
    db: impl Executor<'e, Database = Any>,
    event: &OutboxEvent,
    now: UnixMillis,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO outbox (event_id, event_type, schema_version, aggregate_id, tenant_id, payload, created_at, \
         traceparent) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&event.event_id)
    .bind(event.event_type)
    .bind(i64::from(event.schema_version))
    .bind(&event.aggregate_id)
    .bind(event.tenant.as_str())
    .bind(&event.payload)
    .bind(now.0)
    .bind(event.traceparent.as_deref())
    .execute(db)
    .await
    .map_err(unavailable)?;
    Ok(())
}
