//! `GET /payments` as data: the query a caller sends, the opaque cursor that
//! resumes a listing, and the page rendered from stored payments.
//!
//! A listing is a tenant's payments in creation order, `(created_at, id)`
//! ascending, optionally filtered by exact `accountId` and/or
//! `merchantReference`, `limit` (1–100, default 20) at a time. Pagination
//! is by keyset: the cursor names the last payment a page showed, and the
//! next page starts strictly after it, so payments created while a caller
//! pages through never shift or repeat the ones still to come.
//!
//! # The cursor
//!
//! `<created_at>.<payment id>`: the last shown payment's creation time in
//! epoch milliseconds (1–15 digits) and its id (`pay_` + 32 hex digits),
//! exactly the pattern [`cursor_pattern`] the API document states. Callers
//! pass `nextCursor` back as it is and build nothing from it. Every string
//! of that shape is a valid position (a position between two payments is
//! still a place to resume after), so the document and the server agree on
//! what is accepted; the tenant comes from the API key, never from the
//! cursor. It carries a position, not the filters: a cursor is meaningful
//! with any filter, and resumes after the same place.
//!
//! Every failure is `422 VALIDATION_FAILED` with a message naming the
//! parameter: an unknown or repeated parameter, a limit outside 1–100, an
//! `accountId` or `merchantReference` that `POST /payments` would refuse,
//! a cursor that does not decode.

use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{ObjectBuilder, Required, Type};

use crate::domain::{PaymentId, UnixMillis};
use crate::error::ApiError;
use crate::payments::command::{check_account_id, check_merchant_reference};
use crate::payments::model::{ListPosition, Payment, PaymentFilter};
use crate::payments::response::{PaymentV2, ResponseSchema, render_payment};

/// Payments per page when the caller names no `limit`.
pub const DEFAULT_LIMIT: u32 = 20;
/// The largest `limit` a caller may ask for.
pub const MAX_LIMIT: u32 = 100;

/// Digits of a cursor's creation time: epoch milliseconds up to the year
/// 33658, well inside an `i64`.
const CURSOR_MAX_DIGITS: usize = 15;

/// A valid listing query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPayments {
    pub filter: PaymentFilter,
    pub after: Option<ListPosition>,
    pub limit: u32,
}

fn invalid(parameter: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::InvalidCommand(format!("{parameter}: {why}"))
}

impl ListPayments {
    /// Parses the raw query string (`None`: no `?` at all).
    pub fn parse(query: Option<&str>) -> Result<Self, ApiError> {
        let mut account_id = None;
        let mut merchant_reference = None;
        let mut limit = None;
        let mut cursor = None;
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let slot = match name.as_ref() {
                "accountId" => &mut account_id,
                "merchantReference" => &mut merchant_reference,
                "limit" => &mut limit,
                "cursor" => &mut cursor,
                other => {
                    return Err(invalid(
                        other,
                        "unknown parameter; expected accountId, merchantReference, limit or cursor",
                    ));
                }
            };
            if slot.replace(value.into_owned()).is_some() {
                return Err(invalid(&name, "given more than once"));
            }
        }
        if let Some(account_id) = &account_id {
            check_account_id(account_id)?;
        }
        if let Some(reference) = &merchant_reference {
            check_merchant_reference(reference)?;
        }
        let limit = match limit {
            None => DEFAULT_LIMIT,
            Some(raw) => raw
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or_else(|| {
                    invalid("limit", format!("must be an integer from 1 to {MAX_LIMIT}"))
                })?,
        };
        let after = cursor.as_deref().map(decode_cursor).transpose()?;
        Ok(Self {
            filter: PaymentFilter {
                account_id,
                merchant_reference,
            },
            after,
            limit,
        })
    }
}

/// The cursor that resumes a listing after `position`.
pub fn encode_cursor(position: &ListPosition) -> String {
    format!("{}.{}", position.created_at.0, position.id)
}

/// What every cursor looks like (and every string that looks like one is
/// a position the server resumes after).
pub fn cursor_pattern() -> String {
    let id = PaymentId::pattern();
    let id = id.trim_start_matches('^').trim_end_matches('$');
    format!("^[0-9]{{1,{CURSOR_MAX_DIGITS}}}\\.{id}$")
}

/// The position a cursor names.
pub fn decode_cursor(cursor: &str) -> Result<ListPosition, ApiError> {
    let malformed = || invalid("cursor", "is not a cursor from a previous page");
    let (at, id) = cursor.split_once('.').ok_or_else(malformed)?;
    if at.is_empty() || at.len() > CURSOR_MAX_DIGITS || !at.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed());
    }
    let created_at = at.parse::<i64>().map_err(|_| malformed())?;
    let id = PaymentId::parse(id).ok_or_else(malformed)?;
    Ok(ListPosition {
        created_at: UnixMillis(created_at),
        id,
    })
}

/// The document's query parameters of `GET /payments`, from the constants
/// the checks above use.
#[derive(Debug)]
pub struct ListParams;

impl utoipa::IntoParams for ListParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        use crate::payments::command::schema;
        let query = |name: &str, description: &str, schema: utoipa::openapi::Object| {
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Query)
                .required(Required::False)
                .description(Some(description))
                .schema(Some(schema))
                .build()
        };
        vec![
            query(
                "accountId",
                "Only this account's payments (exact match).",
                schema::account_id(),
            ),
            query(
                "merchantReference",
                "Only the payment with this merchant reference (exact match).",
                schema::merchant_reference(),
            ),
            query(
                "limit",
                "Payments per page.",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1))
                    .maximum(Some(MAX_LIMIT))
                    .default(Some(DEFAULT_LIMIT.into()))
                    .build(),
            ),
            query(
                "cursor",
                "`nextCursor` of the previous page, passed back as it is.",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(cursor_pattern()))
                    .examples([serde_json::json!(
                        "1796158455660.pay_019ad9c2b7e47d43a5b1f0c2d4e6f8a0"
                    )])
                    .build(),
            ),
        ]
    }
}

/// `GET /payments` 200, as documented (the body itself is assembled from
/// each payment's rendering by [`render_page`]).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentListV2 {
    /// The page's payments in creation order, each exactly as
    /// `GET /payments/{id}` renders it.
    pub data: Vec<PaymentV2>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// The page's JSON: each payment's bytes exactly as `GET /payments/{id}`
/// answers them, so a listing and a read never disagree on a field.
pub fn render_page(
    payments: &[Payment],
    next: Option<&ListPosition>,
    schema: ResponseSchema,
) -> Vec<u8> {
    let mut body = Vec::from(&b"{\"data\":["[..]);
    for (i, payment) in payments.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&render_payment(payment, schema));
    }
    body.extend_from_slice(b"],\"nextCursor\":");
    match next {
        // Digits, a dot and an id: nothing to escape.
        Some(position) => {
            body.push(b'"');
            body.extend_from_slice(encode_cursor(position).as_bytes());
            body.push(b'"');
        }
        None => body.extend_from_slice(b"null"),
    }
    body.push(b'}');
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(q: &str) -> Result<ListPayments, u16> {
        ListPayments::parse(Some(q)).map_err(|e| e.status_code().as_u16())
    }

    #[test]
    fn a_cursor_round_trips_and_garbage_is_refused() {
        let position = ListPosition {
            created_at: UnixMillis(1_767_225_600_123),
            id: PaymentId::generate(),
        };
        let cursor = encode_cursor(&position);
        assert_eq!(decode_cursor(&cursor).unwrap(), position);
        let pattern = regex::Regex::new(&cursor_pattern()).unwrap();
        assert!(pattern.is_match(&cursor), "{cursor}");
        let id = position.id.as_str();
        for bad in [
            "",
            "!!",
            "1767225600123",
            &format!("1767225600123{id}"),
            &format!(".{id}"),
            &format!("-1.{id}"),
            &format!("1234567890123456.{id}"),
            &format!("1.{}", &id[..id.len() - 1]),
            &format!("1.{id}x"),
            &cursor[1..cursor.len() - 1],
        ] {
            assert!(decode_cursor(bad).is_err(), "{bad:?}");
            assert!(!pattern.is_match(bad), "the document refuses {bad:?} too");
        }
        // Any string of the documented shape is a position.
        for good in [format!("0.{id}"), format!("999999999999999.{id}")] {
            assert!(pattern.is_match(&good));
            assert!(decode_cursor(&good).is_ok(), "{good}");
        }
    }

    #[test]
    fn a_query_is_parsed_with_defaults_and_refused_when_invalid() {
        let q = parse("accountId=acc_1&merchantReference=order%201").unwrap();
        assert_eq!(q.filter.account_id.as_deref(), Some("acc_1"));
        assert_eq!(q.filter.merchant_reference.as_deref(), Some("order 1"));
        assert_eq!((q.limit, q.after), (DEFAULT_LIMIT, None));
        assert_eq!(ListPayments::parse(None).unwrap().limit, DEFAULT_LIMIT);
        assert_eq!(parse("limit=100").unwrap().limit, 100);
        for bad in [
            "limit=0",
            "limit=101",
            "limit=-1",
            "limit=ten",
            "accountId=",
            "accountId=a%20b",
            "merchantReference=%07",
            "cursor=nope",
            "status=pending",
            "limit=1&limit=2",
        ] {
            assert_eq!(parse(bad).unwrap_err(), 422, "{bad}");
        }
    }

    #[test]
    fn an_empty_last_page_renders_null() {
        let body = render_page(&[], None, ResponseSchema::CURRENT);
        assert_eq!(body, br#"{"data":[],"nextCursor":null}"#);
    }
}
