//! The ledger consumer: one `PAYMENT_CAPTURED` entry per succeeded payment.
//!
//! The entry is keyed `UNIQUE (entry_type, source_payment_id)`: besides the
//! inbox (which dedupes one event id), this stops a second, different event
//! about the same payment from booking the money twice.

use async_trait::async_trait;
use once_domain::UnixMillis;

use crate::consumer::{ConsumeError, Consumer};
use crate::message::{EventMessage, PAYMENT_SUCCEEDED};

pub const NAME: &str = "ledger";
pub const PAYMENT_CAPTURED: &str = "PAYMENT_CAPTURED";

#[derive(Debug, Default, Clone, Copy)]
pub struct LedgerConsumer;

#[async_trait]
impl Consumer for LedgerConsumer {
    fn name(&self) -> &str {
        NAME
    }

    fn handles(&self, event_type: &str) -> bool {
        event_type == PAYMENT_SUCCEEDED
    }

    async fn apply(
        &self,
        tx: &mut sqlx::AnyConnection,
        message: &EventMessage,
        now: UnixMillis,
    ) -> Result<(), ConsumeError> {
        let payment = message.payment()?;
        if payment.amount_minor <= 0 {
            return Err(ConsumeError::Effect(format!(
                "payment {} has a non-positive amount",
                payment.payment_id
            )));
        }
        sqlx::query(
            "INSERT INTO ledger_entries (entry_type, source_payment_id, source_event_id, tenant_id, account_id, amount_minor, currency, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (entry_type, source_payment_id) DO NOTHING",
        )
        .bind(PAYMENT_CAPTURED)
        .bind(&payment.payment_id)
        .bind(&message.event_id)
        .bind(&payment.tenant_id)
        .bind(&payment.account_id)
        .bind(payment.amount_minor)
        .bind(&payment.currency)
        .bind(now.0)
        .execute(&mut *tx)
        .await?;
        Ok(())
    }
}
