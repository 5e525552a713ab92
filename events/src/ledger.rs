//! The ledger consumer: one `PAYMENT_CAPTURED` entry per succeeded payment,
//! a batch of them in one statement (with their inbox rows: [`crate::effect`]).
//!
//! The entry is keyed `UNIQUE (entry_type, source_payment_id)`: besides the
//! inbox (which dedupes one event id), this stops a second, different event
//! about the same payment from booking the money twice.

use once_domain::UnixMillis;

use crate::consumer::{ConsumeError, Consumer};
use crate::effect::Effect;
use crate::message::{EventMessage, PAYMENT_SUCCEEDED};

pub const NAME: &str = "ledger";
pub const PAYMENT_CAPTURED: &str = "PAYMENT_CAPTURED";

#[derive(Debug, Default, Clone, Copy)]
pub struct LedgerConsumer;

impl Consumer for LedgerConsumer {
    fn name(&self) -> &str {
        NAME
    }

    fn handles(&self, event_type: &str) -> bool {
        event_type == PAYMENT_SUCCEEDED
    }

    fn effect(&self, messages: &[EventMessage], now: UnixMillis) -> Result<Effect, ConsumeError> {
        let mut effect = Effect::new(
            "ledger_entries",
            &[
                "entry_type",
                "source_payment_id",
                "source_event_id",
                "tenant_id",
                "account_id",
                "amount_minor",
                "currency",
                "created_at",
            ],
            "(entry_type, source_payment_id)",
        );
        for message in messages {
            let payment = message.payment()?;
            if payment.amount_minor <= 0 {
                return Err(ConsumeError::Effect(format!(
                    "payment {} has a non-positive amount",
                    payment.payment_id
                )));
            }
            effect.row(
                &message.event_id,
                vec![
                    PAYMENT_CAPTURED.into(),
                    payment.payment_id.into(),
                    message.event_id.as_str().into(),
                    payment.tenant_id.into(),
                    payment.account_id.into(),
                    payment.amount_minor.into(),
                    payment.currency.into(),
                    now.0.into(),
                ],
            );
        }
        Ok(effect)
    }
}
