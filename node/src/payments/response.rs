//! What `POST /payments` and `GET /payments/{id}` answer, per response
//! schema version.
//!
//! A stored answer remembers the version it was rendered with and is
//! replayed as stored, so changing the shape here never changes what a
//! retry of an old request receives (I2). To change the shape, add a
//! version, render new answers with it, and keep the old renderer for
//! `GET` clients pinned to it.

use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::{PaymentId, UnixMillis};
use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::idempotency::record::StoredResponse;
use crate::payments::model::Payment;

pub mod schema;

/// The response shapes this build can render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseSchema {
    /// Flat amount and currency.
    V1,
    /// Amount as an object with minor units; `object` and `region` fields.
    V2,
}

impl ResponseSchema {
    pub const CURRENT: ResponseSchema = ResponseSchema::V2;

    pub fn version(self) -> i32 {
        match self {
            Self::V1 => 1,
            Self::V2 => 2,
        }
    }

    pub fn from_version(v: i32) -> Option<Self> {
        match v {
            1 => Some(Self::V1),
            2 => Some(Self::V2),
            _ => None,
        }
    }
}

/// `POST /payments` 201 and `GET /payments/{id}` 200, schema version 1.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PaymentV1 {
    #[schema(schema_with = schema::payment_id)]
    pub id: String,
    #[schema(schema_with = schema::status_field)]
    pub status: String,
    pub account_id: String,
    #[schema(schema_with = schema::decimal)]
    pub amount: String,
    #[schema(schema_with = schema::currency_code)]
    pub currency: String,
    pub merchant_reference: String,
    #[schema(schema_with = schema::channel_field)]
    pub channel: String,
    #[schema(schema_with = schema::created_at)]
    pub created_at: String,
}

/// Schema version 2 (current).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PaymentV2 {
    #[schema(schema_with = schema::object_payment)]
    pub object: &'static str,
    #[schema(schema_with = schema::payment_id)]
    pub id: String,
    #[schema(schema_with = schema::status_field)]
    pub status: String,
    pub account_id: String,
    pub amount: AmountV2,
    pub merchant_reference: String,
    #[schema(schema_with = schema::channel_field)]
    pub channel: String,
    /// The region that took the payment (its first owner; a region that
    /// finished it after a failover keeps this name).
    pub region: String,
    #[schema(schema_with = schema::created_at)]
    pub created_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AmountV2 {
    /// Decimal string at the currency's exponent.
    #[schema(schema_with = schema::decimal)]
    pub value: String,
    #[schema(schema_with = schema::currency_code)]
    pub currency: String,
    #[schema(schema_with = schema::minor_units)]
    pub minor_units: i64,
}

/// `202` answer while an operation's outcome is being recovered.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PendingBody {
    #[schema(schema_with = schema::processing)]
    pub status: &'static str,
    /// The payment, once it exists; retry with the same key for the outcome.
    #[schema(schema_with = schema::pending_payment_id, required = true)]
    pub payment_id: Option<String>,
    pub message: &'static str,
}

pub(crate) fn rfc3339(at: UnixMillis) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(at.0).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

pub fn render_payment(payment: &Payment, schema: ResponseSchema) -> Vec<u8> {
    let result = match schema {
        ResponseSchema::V1 => serde_json::to_vec(&PaymentV1 {
            id: payment.id.to_string(),
            status: payment.status.as_str().into(),
            account_id: payment.account_id.clone(),
            amount: payment.amount.to_decimal_string(),
            currency: payment.amount.currency_code().into(),
            merchant_reference: payment.merchant_reference.clone(),
            channel: payment.channel.as_str().into(),
            created_at: rfc3339(payment.created_at),
        }),
        ResponseSchema::V2 => serde_json::to_vec(&PaymentV2 {
            object: "payment",
            id: payment.id.to_string(),
            status: payment.status.as_str().into(),
            account_id: payment.account_id.clone(),
            amount: AmountV2 {
                value: payment.amount.to_decimal_string(),
                currency: payment.amount.currency_code().into(),
                minor_units: payment.amount.minor_units(),
            },
            merchant_reference: payment.merchant_reference.clone(),
            channel: payment.channel.as_str().into(),
            region: payment.region.clone(),
            created_at: rfc3339(payment.created_at),
        }),
    };
    result.expect("payment bodies serialize")
}

const JSON: (&str, &str) = ("content-type", "application/json");

fn json_headers() -> Vec<(String, String)> {
    vec![(JSON.0.into(), JSON.1.into())]
}

/// The `201 Created` answer for a payment the provider approved.
pub fn created(payment: &Payment, schema: ResponseSchema) -> StoredResponse {
    let mut headers = json_headers();
    headers.push(("location".into(), format!("/payments/{}", payment.id)));
    StoredResponse {
        status: 201,
        headers,
        body: render_payment(payment, schema),
        schema_version: schema.version(),
    }
}

/// A replayable error answer (decline, duplicate merchant reference).
pub fn replayable_error(status: u16, body: &ErrorBody, schema: ResponseSchema) -> StoredResponse {
    StoredResponse {
        status,
        headers: json_headers(),
        body: serde_json::to_vec(body).expect("error bodies serialize"),
        schema_version: schema.version(),
    }
}

/// The answer to a claim whose business key another payment holds: a `409`
/// naming that payment, stored and replayed like any business rejection.
pub fn duplicate_reference(existing: &PaymentId, schema: ResponseSchema) -> StoredResponse {
    let error = ApiError::DuplicateMerchantReference {
        payment_id: existing.to_string(),
    };
    replayable_error(error.status_code().as_u16(), &error.body(), schema)
}

pub fn declined(payment: &Payment, code: &str, schema: ResponseSchema) -> StoredResponse {
    replayable_error(402, &declined_body(&payment.id, code), schema)
}

/// The body of a `402`: the provider's decline code in the message.
pub fn declined_body(payment: &PaymentId, code: &str) -> ErrorBody {
    ErrorBody {
        error_code: ErrorCode::InsufficientFunds,
        message: format!("the payment was declined by the provider ({code})"),
        payment_id: Some(payment.to_string()),
        home_region: None,
        placement_epoch: None,
    }
}

pub fn pending(payment_id: Option<&str>) -> PendingBody {
    PendingBody {
        status: "processing",
        payment_id: payment_id.map(str::to_owned),
        message: "the outcome is being confirmed with the provider; retry with the same Idempotency-Key",
    }
}
