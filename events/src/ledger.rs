//! The ledger consumer: one `PAYMENT_CAPTURED` entry per succeeded payment,
//! a batch of them in one statement.
//!
//! The entry is keyed `UNIQUE (entry_type, source_payment_id)`: besides the
//! inbox (which dedupes one event id), this stops a second, different event
//! about the same payment from booking the money twice.

use async_trait::async_trait;
use once_domain::UnixMillis;

use crate::consumer::{ConsumeError, Consumer};
use crate::message::{EventMessage, PAYMENT_SUCCEEDED};
use crate::placeholders;

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
        messages: &[EventMessage],
        now: UnixMillis,
    ) -> Result<(), ConsumeError> {
        let sql = format!(
            "INSERT INTO ledger_entries (entry_type, source_payment_id, source_event_id, tenant_id, account_id, amount_minor, currency, created_at) \
             VALUES {} ON CONFLICT (entry_type, source_payment_id) DO NOTHING",
            placeholders::rows(messages.len(), 8)
        );
        let mut query = sqlx::query(&sql);
        for message in messages {
            let payment = message.payment()?;
            if payment.amount_minor <= 0 {
                return Err(ConsumeError::Effect(format!(
                    "payment {} has a non-positive amount",
                    payment.payment_id
                )));
            }
            query = query
                .bind(PAYMENT_CAPTURED)
                .bind(payment.payment_id)
                .bind(&message.event_id)
                .bind(payment.tenant_id)
                .bind(payment.account_id)
                .bind(payment.amount_minor)
                .bind(payment.currency)
                .bind(now.0);
        }
        query.execute(&mut *tx).await?;
        Ok(())
    }
}
