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

pub mod schema;

/// The body of `POST /payments`. Unknown fields are refused.
// Its schema in the API document comes from the same constants as the
// checks below (`payments::schema`), with the currency/amount pairing.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PaymentRequest {
    /// The payer's account.
    #[schema(schema_with = schema::account_id)]
    pub account_id: String,
    /// A plain decimal string; at most as many decimals as the currency's
    /// exponent (more only as trailing zeros); greater than zero.
    #[schema(schema_with = schema::amount)]
    pub amount: String,
    /// ISO 4217 code, case-insensitive.
    #[schema(schema_with = schema::currency)]
    pub currency: String,
    /// The merchant's own reference; unique per account.
    #[schema(schema_with = schema::merchant_reference)]
    pub merchant_reference: String,
    /// `web` when absent or null.
    #[schema(schema_with = schema::channel)]
    pub channel: Option<String>,
}

/// `accountId`: at most this many characters of [`is_account_id_char`].
pub const ACCOUNT_ID_MAX_LEN: usize = 64;
/// `merchantReference`: at most this many printable ASCII characters.
pub const MERCHANT_REFERENCE_MAX_LEN: usize = 128;

/// `A-Z`, `a-z`, `0-9`, `_` and `-`: what an account id is made of.
pub fn is_account_id_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Printable ASCII (0x20-0x7E): what a merchant reference is made of.
pub fn is_merchant_reference_char(b: u8) -> bool {
    (0x20..=0x7e).contains(&b)
}

fn is_account_id(s: &str) -> bool {
    (1..=ACCOUNT_ID_MAX_LEN).contains(&s.len()) && s.bytes().all(is_account_id_char)
}

fn is_merchant_reference(s: &str) -> bool {
    (1..=MERCHANT_REFERENCE_MAX_LEN).contains(&s.len()) && s.bytes().all(is_merchant_reference_char)
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
    pub const ALL: [Channel; 3] = [Self::Web, Self::Mobile, Self::Pos];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Web => "web",
            Self::Mobile => "mobile",
            Self::Pos => "pos",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
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
/// by it).
pub fn check_account_id(account_id: &str) -> Result<(), ApiError> {
    if is_account_id(account_id) {
        return Ok(());
    }
    Err(invalid(
        "accountId",
        format!("must be 1-{ACCOUNT_ID_MAX_LEN} characters of A-Z, a-z, 0-9, _ or -"),
    ))
}

/// `merchantReference` as `POST /payments` accepts it (and `GET /payments`
/// filters by it).
pub fn check_merchant_reference(reference: &str) -> Result<(), ApiError> {
    if is_merchant_reference(reference) {
        return Ok(());
    }
    Err(invalid(
        "merchantReference",
        format!("must be 1-{MERCHANT_REFERENCE_MAX_LEN} printable ASCII characters"),
    ))
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
            Some(c) => Channel::parse(c).ok_or_else(|| {
                let names: Vec<&str> = Channel::ALL.iter().map(|c| c.as_str()).collect();
                invalid("channel", format!("must be one of {}", names.join(", ")))
            })?,
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
    fn the_documented_patterns_accept_exactly_what_the_checks_accept() {
        let account = regex::Regex::new(&schema::account_id_pattern()).unwrap();
        let reference = regex::Regex::new(&schema::merchant_reference_pattern()).unwrap();
        let mut samples: Vec<String> = [
            "",
            "acc_1",
            "ACC-9",
            "acc 1",
            "acc.1",
            "acc\n",
            "ä",
            "order #42 / 2026",
            " ",
            "~",
        ]
        .map(str::to_owned)
        .to_vec();
        // Every ASCII character alone and inside an otherwise valid value,
        // and the lengths around both limits.
        samples.extend((0..=127u8).flat_map(|b| {
            let c = char::from(b);
            [c.to_string(), format!("a{c}z")]
        }));
        for len in [63, 64, 65, 127, 128, 129] {
            samples.push("a".repeat(len));
        }
        for sample in &samples {
            assert_eq!(
                account.is_match(sample),
                is_account_id(sample),
                "accountId {sample:?}"
            );
            assert_eq!(
                reference.is_match(sample),
                is_merchant_reference(sample),
                "merchantReference {sample:?}"
            );
        }
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
