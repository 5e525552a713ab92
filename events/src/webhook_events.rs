//! The `webhooks` consumer: every published event, whatever its type,
//! becomes a `webhook_events` row, the source the node's webhook
//! dispatcher fans out to the tenant's endpoints and `GET /events` lists
//! (DESIGN §11, decision 0091).
//!
//! It is generic over event types on purpose: an event type added later
//! (`refund.*`) reaches webhooks without a change here. The row is keyed
//! by the event id, so a second publish of the same event (the outbox's
//! at-least-once) changes nothing even past the inbox.

use once_domain::UnixMillis;

use crate::consumer::{ConsumeError, Consumer};
use crate::effect::Effect;
use crate::message::EventMessage;

pub const NAME: &str = "webhooks";

#[derive(Debug, Default, Clone, Copy)]
pub struct WebhookEventsConsumer;

impl Consumer for WebhookEventsConsumer {
    fn name(&self) -> &str {
        NAME
    }

    fn handles(&self, _event_type: &str) -> bool {
        true
    }

    fn effect(&self, messages: &[EventMessage], _now: UnixMillis) -> Result<Effect, ConsumeError> {
        let mut effect = Effect::new(
            "webhook_events",
            &[
                "event_id",
                "tenant_id",
                "event_type",
                "aggregate_id",
                "data",
                "created_at",
            ],
            "(event_id)",
        );
        for message in messages {
            effect.row(
                &message.event_id,
                vec![
                    message.event_id.as_str().into(),
                    message.tenant_id.as_str().into(),
                    message.event_type.as_str().into(),
                    message.aggregate_id.as_str().into(),
                    message.data.to_string().into(),
                    message.occurred_at.into(),
                ],
            );
        }
        Ok(effect)
    }
}
