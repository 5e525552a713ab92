//! The document's view of the answers ([`super`]): the payment id, status
//! and channel values, the rendered amount and time, made from the types
//! that render them; and the path parameter that takes a payment id.

use serde_json::json;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{SchemaFormat, SchemaType};
use utoipa::openapi::{KnownFormat, Object, ObjectBuilder, Ref, Required, Type};

use crate::domain::{Money, PaymentId};
use crate::payments::command::Channel;
use crate::payments::model::PaymentStatus;

fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

/// Exactly one string value.
fn constant(value: &str) -> Object {
    string().enum_values(Some([value])).build()
}

/// The path parameter of `GET /payments/{id}`.
#[derive(Debug)]
pub struct PaymentPath;

impl utoipa::IntoParams for PaymentPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            ParameterBuilder::new()
                .name("id")
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .description(Some(
                    "The payment's id. Anything else, like another tenant's id, is 404 PAYMENT_NOT_FOUND.",
                ))
                .schema(Some(payment_id()))
                .build(),
        ]
    }
}

pub fn payment_id() -> Object {
    string()
        .description(Some("A payment id: `pay_` and 32 hex digits."))
        .pattern(Some(PaymentId::pattern()))
        .examples([json!("pay_019ad9b0c6a97e43b8d33a0b4f6c2e11")])
        .build()
}

/// The `PaymentStatus` component ([`crate::openapi`]): one enum that every
/// rendering of a payment refers to, so a generated client has one type of it.
pub fn payment_status() -> Object {
    string()
        .description(Some(
            "`pending` until the provider's outcome is known, then `succeeded` or `declined`.",
        ))
        .enum_values(Some(PaymentStatus::ALL.map(PaymentStatus::as_str)))
        .build()
}

/// The `Channel` component: where the payer is, shared by the request body
/// and both renderings of a payment.
pub fn channel() -> Object {
    string()
        .description(Some("Where the payer is."))
        .enum_values(Some(Channel::ALL.map(Channel::as_str)))
        .build()
}

/// A payment's `status` field: the shared `PaymentStatus`.
pub fn status_field() -> Ref {
    Ref::from_schema_name(PAYMENT_STATUS)
}

/// A payment's `channel` field: the shared `Channel` (named where the
/// request's channel is described, so the request side needs nothing here).
pub use crate::payments::command::schema::channel_field;

/// The shared enums' component names.
pub const PAYMENT_STATUS: &str = "PaymentStatus";
pub use crate::payments::command::schema::CHANNEL;

/// `payment`, the object type of schema 2.
pub fn object_payment() -> Object {
    constant("payment")
}

/// `processing`, the status of a `202` answer.
pub fn processing() -> Object {
    constant("processing")
}

/// The amount as rendered: exactly the currency's decimals.
pub fn decimal() -> Object {
    string()
        .pattern(Some(r"^[0-9]+(?:\.[0-9]+)?$"))
        .examples([json!("10.00")])
        .build()
}

/// The currency as rendered: its upper-case code.
pub fn currency_code() -> Object {
    string().pattern(Some("^[A-Z]{3}$")).build()
}

pub fn minor_units() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(1))
        .maximum(Some(Money::MAX_MINOR_UNITS))
        .build()
}

pub fn created_at() -> Object {
    string()
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
        .examples([json!("2026-11-29T20:06:36.803Z")])
        .build()
}

/// A `202`'s payment id: the payment, or null before it exists.
pub fn pending_payment_id() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .pattern(Some(PaymentId::pattern()))
        .build()
}
