//! `POST /payments` input: the wire DTO, its validation, and the normalized
//! command the rest of the node works with.
//!
//! Parsing happens in two stages so that each failure gets its documented
//! status: bytes that are not a JSON object are `400 VALIDATION_FAILED`; a
//! JSON object that is not a valid command (unknown or missing field, wrong
//! type, bad amount or currency) is `422 VALIDATION_FAILED`, and the message
//! names the field.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::{Money, MoneyError};
use crate::error::ApiError;
use crate::idempotency::fingerprint::{self, Fingerprint};
use crate::idempotency::record::CREATE_PAYMENT;

/// The request body, exactly as clients send it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PaymentRequest {
    /// The payer's account, `[A-Za-z0-9_-]{1,64}`.
    #[schema(example = "acc_123")]
    pub account_id: String,
    /// A plain decimal string; at most as many decimals as the currency's exponent.
    #[schema(example = "10.00")]
    pub amount: String,
    /// ISO 4217 code, case-insensitive.
    #[schema(example = "EUR")]
    pub currency: String,
    /// The merchant's own reference; unique per account. 1–128 printable characters.
    #[schema(example = "order-2026-0001")]
    pub merchant_reference: String,
    /// `web` (default), `mobile` or `pos`.
    #[schema(example = "web")]
    pub channel: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Web,
    Mobile,
    Pos,
}

impl Channel {
    pub const DEFAULT: Channel = Channel::Web;

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Web => "web",
            Self::Mobile => "mobile",
            Self::Pos => "pos",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "web" => Some(Self::Web),
            "mobile" => Some(Self::Mobile),
            "pos" => Some(Self::Pos),
            _ => None,
        }
    }
}

/// A valid, normalized "create payment" command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePayment {
    pub account_id: String,
    pub amount: Money,
    pub merchant_reference: String,
    pub channel: Channel,
}

/// The canonical form that is fingerprinted. Field order here is the
/// serialization order, so it must never change for a given version.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CanonicalCreatePayment<'a> {
    pub account_id: &'a str,
    pub amount_minor: i64,
    pub currency: &'a str,
    pub merchant_reference: &'a str,
    pub channel: &'a str,
}

impl CreatePayment {
    /// Parses a request body; see the module docs for the status of each failure.
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        // serde would also accept a JSON array for a struct (fields by
        // position); the API only takes objects.
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::MalformedJson("body must be a JSON object".into()));
        }
        let mut deserializer = serde_json::Deserializer::from_slice(body);
        let request: PaymentRequest =
            serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
                let path = e.path().to_string();
                let inner = e.into_inner();
                match inner.classify() {
                    // Well-formed JSON that is not a valid command.
                    serde_json::error::Category::Data => ApiError::InvalidCommand(if path == "." {
                        inner.to_string()
                    } else {
                        format!("{path}: {inner}")
                    }),
                    _ => ApiError::MalformedJson(format!("body is not valid JSON: {inner}")),
                }
            })?;
        deserializer
            .end()
            .map_err(|e| ApiError::MalformedJson(format!("body is not valid JSON: {e}")))?;
        Self::try_from(request)
    }

    pub fn canonical(&self) -> CanonicalCreatePayment<'_> {
        CanonicalCreatePayment {
            account_id: &self.account_id,
            amount_minor: self.amount.minor_units(),
            currency: self.amount.currency_code(),
            merchant_reference: &self.merchant_reference,
            channel: self.channel.as_str(),
        }
    }

    /// The command's fingerprint under `version` (DESIGN §4); `None` when
    /// this build does not know that version.
    pub fn fingerprint(&self, version: i32, api_version: &str) -> Option<Fingerprint> {
        fingerprint::of(version, CREATE_PAYMENT, api_version, self.canonical())
    }
}

fn invalid(field: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::InvalidCommand(format!("{field}: {why}"))
}

/// `accountId` as `POST /payments` accepts it (and `GET /payments` filters
/// by it): `[A-Za-z0-9_-]{1,64}`.
pub fn check_account_id(account_id: &str) -> Result<(), ApiError> {
    let id_like = account_id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if account_id.is_empty() || account_id.len() > 64 || !id_like {
        return Err(invalid(
            "accountId",
            "must be 1-64 characters of A-Z, a-z, 0-9, _ or -",
        ));
    }
    Ok(())
}

/// `merchantReference` as `POST /payments` accepts it: 1–128 printable
/// ASCII characters.
pub fn check_merchant_reference(reference: &str) -> Result<(), ApiError> {
    if reference.is_empty()
        || reference.len() > 128
        || !reference.bytes().all(|b| (0x20..=0x7e).contains(&b))
    {
        return Err(invalid(
            "merchantReference",
            "must be 1-128 printable ASCII characters",
        ));
    }
    Ok(())
}

impl TryFrom<PaymentRequest> for CreatePayment {
    type Error = ApiError;

    fn try_from(r: PaymentRequest) -> Result<Self, ApiError> {
        check_account_id(&r.account_id)?;
        check_merchant_reference(&r.merchant_reference)?;
        let amount = Money::parse(&r.amount, &r.currency).map_err(|e| match e {
            MoneyError::UnknownCurrency | MoneyError::NotChargeable(_) => invalid("currency", e),
            _ => invalid("amount", e),
        })?;
        let channel = match r.channel.as_deref() {
            None => Channel::DEFAULT,
            Some(c) => Channel::parse(c)
                .ok_or_else(|| invalid("channel", "must be one of web, mobile, pos"))?,
        };
        Ok(Self {
            account_id: r.account_id,
            amount,
            merchant_reference: r.merchant_reference,
            channel,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_of(body: &str) -> u16 {
        CreatePayment::parse(body.as_bytes())
            .unwrap_err()
            .status_code()
            .as_u16()
    }

    #[test]
    fn malformed_json_is_400_and_invalid_commands_are_422() {
        assert_eq!(status_of("{"), 400);
        assert_eq!(status_of("[1]"), 400);
        assert_eq!(
            status_of(r#"{"accountId":"a","amount":10,"currency":"EUR","merchantReference":"r"}"#),
            422
        );
        assert_eq!(
            status_of(r#"{"accountId":"a","amount":"10","currency":"EUR"}"#),
            422
        );
        assert_eq!(
            status_of(
                r#"{"accountId":"a","amount":"10","currency":"EUR","merchantReference":"r","x":1}"#
            ),
            422
        );
        assert_eq!(
            status_of(
                r#"{"accountId":"a","accountId":"b","amount":"10","currency":"EUR","merchantReference":"r"}"#
            ),
            422
        );
        assert_eq!(
            status_of(
                r#"{"accountId":"a","amount":"10","currency":"EUR","merchantReference":"r"} trailing"#
            ),
            400
        );
        assert_eq!(status_of(r#"["a","10","EUR","r",null]"#), 400);
    }

    #[test]
    fn messages_name_the_field() {
        let err = CreatePayment::parse(
            br#"{"accountId":"a","amount":10,"currency":"EUR","merchantReference":"r"}"#,
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("amount:"), "{err}");
        let err = CreatePayment::parse(
            br#"{"accountId":"a","amount":"1","currency":"EUR","merchantReference":"r","tip":"1"}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("tip"), "{err}");
        let err = CreatePayment::parse(
            br#"{"accountId":"a","amount":"1","currency":"ZZZ","merchantReference":"r"}"#,
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("currency:"), "{err}");
    }

    #[test]
    fn defaults_are_filled_and_values_normalized() {
        let a = CreatePayment::parse(
            br#"{"accountId":"a","amount":"10.0","currency":"eur","merchantReference":"r"}"#,
        )
        .unwrap();
        let b = CreatePayment::parse(
            br#"{ "channel":"web", "merchantReference":"r","currency":"EUR", "amount":"10.00","accountId":"a" }"#,
        )
        .unwrap();
        assert_eq!(a, b);
    }

    fn fp(body: &str) -> String {
        let cmd = CreatePayment::parse(body.as_bytes()).unwrap();
        cmd.fingerprint(1, "2026-11-01").unwrap().hash
    }

    #[test]
    fn equal_commands_have_equal_fingerprints() {
        let base =
            fp(r#"{"accountId":"a","amount":"10.00","currency":"EUR","merchantReference":"r"}"#);
        assert_eq!(
            base,
            fp(r#"{"merchantReference":"r","currency":"eur","amount":"10.0","accountId":"a"}"#)
        );
        assert_eq!(
            base,
            fp(
                r#"{"accountId":"a","amount":"10","currency":"EUR","merchantReference":"r","channel":"web"}"#
            )
        );
        assert_ne!(
            base,
            fp(r#"{"accountId":"a","amount":"10.01","currency":"EUR","merchantReference":"r"}"#)
        );
        assert_ne!(
            base,
            fp(
                r#"{"accountId":"a","amount":"10.00","currency":"EUR","merchantReference":"r","channel":"pos"}"#
            )
        );
    }

    #[test]
    fn the_semantic_header_is_part_of_the_fingerprint() {
        let cmd = CreatePayment::parse(
            br#"{"accountId":"a","amount":"1","currency":"EUR","merchantReference":"r"}"#,
        )
        .unwrap();
        let a = cmd.fingerprint(1, "2026-11-01").unwrap();
        let b = cmd.fingerprint(1, "2027-01-01").unwrap();
        assert_ne!(a, b);
        assert!(cmd.fingerprint(99, "2026-11-01").is_none());
    }
}
