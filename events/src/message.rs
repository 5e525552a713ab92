//! The event envelope on the wire, and the data of the payment events.
//! `docs/events.md` is the contract; this file is its code. Consumers decode
//! the envelope first and then the data of the `schemaVersion` they know, so
//! a new version is a new data type here, never a changed one.

use serde::{Deserialize, Serialize};

/// One event as published: JSON, camelCase. `eventId` is the message id the
/// broker and every consumer dedupe on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventMessage {
    pub event_id: String,
    pub event_type: String,
    pub schema_version: i32,
    /// The payment the event is about.
    pub aggregate_id: String,
    pub tenant_id: String,
    /// When the payment's transaction wrote the event (epoch millis).
    pub occurred_at: i64,
    pub data: serde_json::Value,
    /// W3C `traceparent` of the request that wrote the event: consumers
    /// continue that trace. Absent on events written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error("not an event envelope: {0}")]
    Envelope(#[source] serde_json::Error),
    #[error("{event_type} v{version} has invalid data: {source}")]
    Data {
        event_type: String,
        version: i32,
        #[source]
        source: serde_json::Error,
    },
    #[error("{event_type} schema version {version} is not known to this consumer")]
    UnknownVersion { event_type: String, version: i32 },
}

pub const PAYMENT_SUCCEEDED: &str = "payment.succeeded";
pub const PAYMENT_DECLINED: &str = "payment.declined";

impl EventMessage {
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an envelope always serializes")
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, MessageError> {
        serde_json::from_slice(bytes).map_err(MessageError::Envelope)
    }

    /// The data of `payment.succeeded` / `payment.declined`, version 1.
    pub fn payment(&self) -> Result<PaymentEventV1, MessageError> {
        if self.schema_version != 1 {
            return Err(MessageError::UnknownVersion {
                event_type: self.event_type.clone(),
                version: self.schema_version,
            });
        }
        serde_json::from_value(self.data.clone()).map_err(|source| MessageError::Data {
            event_type: self.event_type.clone(),
            version: self.schema_version,
            source,
        })
    }
}

/// `payment.succeeded` and `payment.declined`, schema version 1, exactly as
/// `engine::execute` writes them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentEventV1 {
    pub payment_id: String,
    pub tenant_id: String,
    pub account_id: String,
    pub merchant_reference: String,
    /// Decimal string at the currency's exponent, e.g. `"10.00"`.
    pub amount: String,
    pub currency: String,
    pub amount_minor: i64,
    /// `succeeded` or `declined`.
    pub status: String,
    pub decline_code: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_round_trips_and_reads_v1_payment_data() {
        let message = EventMessage {
            event_id: "evt_1".into(),
            event_type: PAYMENT_SUCCEEDED.into(),
            schema_version: 1,
            aggregate_id: "pay_1".into(),
            tenant_id: "acme".into(),
            occurred_at: 1_700_000_000_000,
            data: serde_json::json!({
                "paymentId": "pay_1", "tenantId": "acme", "accountId": "acc_1",
                "merchantReference": "o-1", "amount": "10.00", "currency": "EUR",
                "amountMinor": 1000, "status": "succeeded", "declineCode": null
            }),
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        };
        let back = EventMessage::from_bytes(&message.to_bytes()).unwrap();
        assert_eq!(back, message);
        assert_eq!(back.payment().unwrap().amount_minor, 1000);
    }

    #[test]
    fn unknown_versions_and_bad_data_are_errors_not_guesses() {
        let mut message = EventMessage {
            event_id: "evt_1".into(),
            event_type: PAYMENT_SUCCEEDED.into(),
            schema_version: 2,
            aggregate_id: "pay_1".into(),
            tenant_id: "acme".into(),
            occurred_at: 0,
            data: serde_json::json!({}),
            traceparent: None,
        };
        assert!(matches!(
            message.payment(),
            Err(MessageError::UnknownVersion { version: 2, .. })
        ));
        message.schema_version = 1;
        assert!(matches!(message.payment(), Err(MessageError::Data { .. })));
        assert!(EventMessage::from_bytes(b"not json").is_err());
    }
}
