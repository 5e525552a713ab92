//! [`Payment`] as the API renders it, and [`Created`].
//!
//! A replay returns the body exactly as it was first rendered, so a payment
//! created before the current response schema comes back in the old one:
//! both are read into one [`Payment`] (schema 1 has a flat amount and
//! currency, no minor units and no region).

use once_domain::IdempotencyKey;
use serde::Deserialize;

/// A payment, in either response schema.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "Rendered")]
pub struct Payment {
    /// `pay_…`.
    pub id: String,
    pub status: PaymentStatus,
    pub account_id: String,
    pub amount: Amount,
    pub merchant_reference: String,
    pub channel: String,
    /// The region that took the payment (schema 2 only).
    pub region: Option<String>,
    /// RFC 3339, milliseconds, UTC.
    pub created_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Amount {
    /// Decimal string at the currency's exponent, e.g. `"10.00"`.
    pub value: String,
    pub currency: String,
    /// Schema 2 only.
    pub minor_units: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PaymentStatus {
    Pending,
    Succeeded,
    Declined,
    /// A status this client does not know yet (the API may add some).
    #[serde(untagged)]
    Other(String),
}

/// A `create_payment` call that ended with a payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub payment: Payment,
    /// The answer was the stored one (`Idempotent-Replayed: true`): an
    /// earlier attempt, or an earlier call with this key, created it.
    pub replayed: bool,
    /// The key the call used; the same request with it replays this answer.
    pub idempotency_key: IdempotencyKey,
    /// How many HTTP attempts the call made.
    pub attempts: u32,
    /// `X-Once-Region` of the final answer, through a router.
    pub region: Option<String>,
}

/// The two shapes on the wire.
#[derive(Deserialize)]
#[serde(untagged)]
enum Rendered {
    #[serde(rename_all = "camelCase")]
    V2 {
        id: String,
        status: PaymentStatus,
        account_id: String,
        amount: Amount,
        merchant_reference: String,
        channel: String,
        region: Option<String>,
        created_at: String,
    },
    #[serde(rename_all = "camelCase")]
    V1 {
        id: String,
        status: PaymentStatus,
        account_id: String,
        amount: String,
        currency: String,
        merchant_reference: String,
        channel: String,
        created_at: String,
    },
}

impl From<Rendered> for Payment {
    fn from(rendered: Rendered) -> Self {
        match rendered {
            Rendered::V2 {
                id,
                status,
                account_id,
                amount,
                merchant_reference,
                channel,
                region,
                created_at,
            } => Self {
                id,
                status,
                account_id,
                amount,
                merchant_reference,
                channel,
                region,
                created_at,
            },
            Rendered::V1 {
                id,
                status,
                account_id,
                amount,
                currency,
                merchant_reference,
                channel,
                created_at,
            } => Self {
                id,
                status,
                account_id,
                amount: Amount {
                    value: amount,
                    currency,
                    minor_units: None,
                },
                merchant_reference,
                channel,
                region: None,
                created_at,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_response_schemas_read_into_one_payment() {
        let v2: Payment = serde_json::from_str(
            r#"{"object":"payment","id":"pay_1","status":"succeeded","accountId":"acc_1",
                "amount":{"value":"10.00","currency":"EUR","minorUnits":1000},
                "merchantReference":"order-1","channel":"web","region":"eu","createdAt":"2026-11-29T20:06:36.803Z"}"#,
        )
        .unwrap();
        let v1: Payment = serde_json::from_str(
            r#"{"id":"pay_1","status":"succeeded","accountId":"acc_1","amount":"10.00","currency":"EUR",
                "merchantReference":"order-1","channel":"web","createdAt":"2026-11-29T20:06:36.803Z"}"#,
        )
        .unwrap();
        assert_eq!(v2.amount.minor_units, Some(1000));
        assert_eq!(v2.region.as_deref(), Some("eu"));
        assert_eq!(
            Payment {
                amount: Amount {
                    minor_units: None,
                    ..v2.amount.clone()
                },
                region: None,
                ..v2
            },
            v1
        );
        assert_eq!(v1.status, PaymentStatus::Succeeded);
    }

    #[test]
    fn an_unknown_status_is_kept_not_refused() {
        let status: PaymentStatus = serde_json::from_str(r#""refunded""#).unwrap();
        assert_eq!(status, PaymentStatus::Other("refunded".into()));
    }
}
