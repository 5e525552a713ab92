//! The document's view of the `POST /payments` body: each field's
//! pattern, lengths or values from the constants the checks in
//! [`super`] use, and the currency/amount pairing per currency exponent
//! from [`Money`]'s. Every pattern is an anchored regular expression in the
//! syntax JSON Schema, Python and the `regex` crate share; the tests beside
//! each check compare the two.

use serde_json::json;
use utoipa::openapi::schema::{AllOfBuilder, OneOfBuilder};
use utoipa::openapi::{Object, ObjectBuilder, RefOr, Schema, Type};

use super::{ACCOUNT_ID_MAX_LEN, MERCHANT_REFERENCE_MAX_LEN};
use crate::domain::Money;

fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

/// The character class of [`super::is_account_id_char`].
pub fn account_id_pattern() -> String {
    format!("^[A-Za-z0-9_-]{{1,{ACCOUNT_ID_MAX_LEN}}}$")
}

/// The character class of [`super::is_merchant_reference_char`].
pub fn merchant_reference_pattern() -> String {
    format!("^[\\x20-\\x7E]{{1,{MERCHANT_REFERENCE_MAX_LEN}}}$")
}

pub fn account_id() -> Object {
    string()
        .description(Some("The payer's account."))
        .min_length(Some(1))
        .max_length(Some(ACCOUNT_ID_MAX_LEN))
        .pattern(Some(account_id_pattern()))
        .examples([json!("acc_123")])
        .build()
}

pub fn merchant_reference() -> Object {
    string()
        .description(Some(
            "The merchant's own reference: printable ASCII, unique per (tenant, accountId). \
             A second payment with the same reference and another Idempotency-Key is \
             409 DUPLICATE_MERCHANT_REFERENCE.",
        ))
        .min_length(Some(1))
        .max_length(Some(MERCHANT_REFERENCE_MAX_LEN))
        .pattern(Some(merchant_reference_pattern()))
        .examples([json!("order-2026-0001")])
        .build()
}

/// Which amounts a currency takes depends on its exponent: that pairing is
/// [`currency_amount_pairs`], so the field itself says only "a string".
pub fn amount() -> Object {
    string()
        .description(Some(
            "A plain decimal string, greater than zero: digits, optionally a point and \
             more digits; no sign, exponent or spaces. At most as many decimals as the \
             currency has (more only as trailing zeros: \"10.000\" EUR is 10.00), and at \
             most 10^15 minor units. The pattern for each currency exponent is in the \
             body's oneOf.",
        ))
        .examples([json!("10.00")])
        .build()
}

pub fn currency() -> Object {
    string()
        .description(Some(
            "ISO 4217 code of a currency with a minor unit, in any letter case. The codes \
             for each currency exponent are in the body's oneOf.",
        ))
        .examples([json!("EUR")])
        .build()
}

/// The shared enum `Channel`'s component name.
pub const CHANNEL: &str = "Channel";

/// A `channel` field: the shared `Channel`.
pub fn channel_field() -> utoipa::openapi::Ref {
    utoipa::openapi::Ref::from_schema_name(CHANNEL)
}

/// The shared `Channel` or null: absent or null is `web`.
pub fn channel() -> Schema {
    OneOfBuilder::new()
        .item(channel_field())
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some("Where the payer is; absent or null is `web`."))
        .into()
}

/// The body's currency and amount, one branch per currency exponent: the
/// currencies of that exponent and the amounts they take. Exactly one
/// branch matches a valid body (a currency has one exponent).
pub fn currency_amount_pairs() -> Schema {
    let branches = Money::exponents().into_iter().map(|exponent| {
        ObjectBuilder::new()
            .description(Some(format!(
                "Currencies with {exponent} decimals and their amounts"
            )))
            .property(
                "currency",
                string().pattern(Some(Money::currency_pattern(exponent))),
            )
            .property(
                "amount",
                string().pattern(Some(Money::amount_pattern(exponent))),
            )
            .build()
    });
    branches
        .fold(OneOfBuilder::new(), OneOfBuilder::item)
        .build()
        .into()
}

/// The request body: the fields as `PaymentRequest` derives them, and the
/// pairing they must also satisfy.
pub fn payment_request(fields: RefOr<Schema>) -> Schema {
    AllOfBuilder::new()
        .item(fields)
        .item(currency_amount_pairs())
        .examples([json!({
            "accountId": "acc_123",
            "amount": "10.00",
            "currency": "EUR",
            "merchantReference": "order-2026-0001",
            "channel": "web"
        })])
        .build()
        .into()
}
