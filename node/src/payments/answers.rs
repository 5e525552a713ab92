//! Every answer of `POST /payments`, `GET /payments/{id}` and `GET
//! /payments` as the API
//! document states it: each status with its error codes (grouped from
//! [`ApiError::examples`], so status, code, body and headers are what
//! [`ApiError::into_response`] really makes), its headers, its examples and,
//! on the answers that name a payment, the link to read it.
//!
//! Every refusal's body is the one shared `ErrorBody` component, its
//! `errorCode` the one `ErrorCode` enum: the codes a status answers are
//! named in its description and shown one example each, not narrowed in an
//! inline schema, because a generator makes a type of every inline enum (one
//! `…Response503ErrorCode` per operation and status) and a client then has
//! as many error models as answers instead of one.
//!
//! Which refusals an operation can answer is listed here per operation;
//! the document test (`tests/api/ops.rs`) checks every code appears on one
//! of them or on the edge's answers to no operation (404, 405).

use std::collections::BTreeMap;

use axum::http::HeaderName;
use axum::response::IntoResponse;
use utoipa::openapi::example::ExampleBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::OneOfBuilder;
use utoipa::openapi::{ContentBuilder, ObjectBuilder, Ref, RefOr, Type};

use crate::domain::{Money, PaymentId, TenantId, UnixMillis};
use crate::error::{ApiError, ErrorCode};
use crate::payments::command::Channel;
use crate::payments::model::{Payment, PaymentStatus};
use crate::payments::response::{self, ResponseSchema};

/// The operation ids links point at.
pub const CREATE_PAYMENT: &str = "createPayment";
pub const GET_PAYMENT: &str = "getPayment";

/// A header description starting with this marks the header `required`
/// (utoipa's `Header` has no such field; `crate::openapi` adds it).
pub const ALWAYS_SENT: &str = "Always sent.";

/// What `POST /payments` refuses with, besides its own `402`. Every
/// operation also answers `403 FORBIDDEN` on a node behind routers
/// (`--api-callers routers`) to a caller whose certificate is not a
/// router's or an operator's.
const CREATE_REFUSALS: &[ErrorCode] = &[
    ErrorCode::IdempotencyKeyRequired,
    ErrorCode::IdempotencyKeyInvalid,
    ErrorCode::IdempotencyKeyMalformed,
    ErrorCode::ValidationFailed,
    ErrorCode::Unauthorized,
    ErrorCode::Forbidden,
    ErrorCode::RequestTimeout,
    ErrorCode::IdempotencyKeyReusedWithDifferentRequest,
    ErrorCode::IdempotencyRequestInProgress,
    ErrorCode::DuplicateMerchantReference,
    ErrorCode::PayloadTooLarge,
    ErrorCode::MisdirectedRequest,
    ErrorCode::RateLimited,
    ErrorCode::InternalError,
    ErrorCode::ServiceUnavailable,
    ErrorCode::ServiceOverloaded,
];

/// What `GET /payments/{id}` refuses with. `INVALID_PATH`: an id with a
/// backslash or an encoded dot or slash never reaches the routes.
const FETCH_REFUSALS: &[ErrorCode] = &[
    ErrorCode::InvalidPath,
    ErrorCode::Unauthorized,
    ErrorCode::Forbidden,
    ErrorCode::PaymentNotFound,
    ErrorCode::RateLimited,
    ErrorCode::InternalError,
    ErrorCode::ServiceUnavailable,
    ErrorCode::ServiceOverloaded,
];

/// What `GET /payments` refuses with: a query the listing does not take
/// (`VALIDATION_FAILED`, naming the parameter) and the edge's refusals.
const LIST_REFUSALS: &[ErrorCode] = &[
    ErrorCode::ValidationFailed,
    ErrorCode::Unauthorized,
    ErrorCode::Forbidden,
    ErrorCode::RateLimited,
    ErrorCode::InternalError,
    ErrorCode::ServiceUnavailable,
    ErrorCode::ServiceOverloaded,
];

/// The answers of `GET /payments`.
#[derive(Debug)]
pub struct ListAnswers;

impl utoipa::IntoResponses for ListAnswers {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let mut answers = refusals(LIST_REFUSALS, &[]);
        answers.insert("200".into(), page().into());
        answers.insert("431".into(), headers_too_large().into());
        answers
    }
}

/// The answers of `POST /payments`.
#[derive(Debug)]
pub struct CreateAnswers;

impl utoipa::IntoResponses for CreateAnswers {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let mut answers = refusals(CREATE_REFUSALS, &[409]);
        answers.insert("201".into(), created().into());
        answers.insert("202".into(), pending().into());
        answers.insert("402".into(), declined().into());
        answers.insert("431".into(), headers_too_large().into());
        answers
    }
}

/// The answers of `GET /payments/{id}`.
#[derive(Debug)]
pub struct FetchAnswers;

impl utoipa::IntoResponses for FetchAnswers {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let mut answers = refusals(FETCH_REFUSALS, &[]);
        answers.insert("200".into(), read().into());
        answers.insert("431".into(), headers_too_large().into());
        answers
    }
}

/// A payment as the examples show it.
fn example_payment(status: PaymentStatus) -> Payment {
    Payment {
        id: PaymentId::parse("pay_019ad9b0c6a97e43b8d33a0b4f6c2e11").expect("a payment id"),
        tenant: TenantId::parse("acme").expect("a tenant id"),
        account_id: "acc_123".into(),
        merchant_reference: "order-2026-0001".into(),
        amount: Money::parse("10.00", "EUR").expect("an amount"),
        channel: Channel::Web,
        status,
        provider_charge_id: None,
        decline_code: None,
        region: "eu-west".into(),
        created_at: UnixMillis(1_796_069_196_803),
        updated_at: UnixMillis(1_796_069_196_803),
    }
}

fn example_of(status: PaymentStatus, schema: ResponseSchema) -> serde_json::Value {
    serde_json::from_slice(&response::render_payment(&example_payment(status), schema))
        .expect("a payment renders as JSON")
}

/// A payment in either response schema: a replay answers with the schema
/// it was first rendered with, and a node may render schema 1.
fn payment_body() -> RefOr<utoipa::openapi::Schema> {
    OneOfBuilder::new()
        .item(Ref::from_schema_name("PaymentV2"))
        .item(Ref::from_schema_name("PaymentV1"))
        .into()
}

fn json_content(
    schema: impl Into<RefOr<utoipa::openapi::Schema>>,
    examples: impl IntoIterator<Item = (String, serde_json::Value)>,
) -> utoipa::openapi::Content {
    ContentBuilder::new()
        .schema(Some(schema))
        .examples_from_iter(
            examples
                .into_iter()
                .map(|(name, value)| (name, ExampleBuilder::new().value(Some(value)))),
        )
        .build()
}

fn header(description: &str, schema: ObjectBuilder) -> utoipa::openapi::header::Header {
    HeaderBuilder::new()
        .description(Some(description))
        .schema(schema)
        .build()
}

fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

fn seconds() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(1))
}

/// `X-Trace-Id` and `traceresponse`, set by the edge's observe layer
/// (`once_edge::observe`) on every answer that passed through the routes.
/// Refusals made by the server before the routes (an invalid path, a shed
/// or late request, a panic) carry neither.
fn with_trace_headers(mut answer: ResponseBuilder, always: bool) -> ResponseBuilder {
    let sent = if always {
        format!("{ALWAYS_SENT} ")
    } else {
        "Sent when the answer passed through the routes: ".to_owned()
    };
    answer = answer.header(
        "X-Trace-Id",
        header(
            &format!("{sent}the trace of this request (32 hex digits)."),
            string().pattern(Some("^[0-9a-f]{32}$")),
        ),
    );
    answer.header(
        "traceresponse",
        header(
            &format!("{sent}W3C Trace Context `traceresponse`."),
            string().pattern(Some("^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")),
        ),
    )
}

/// `Idempotent-Replayed` and `Idempotent-Original-Trace-Id`, on an answer
/// that can be a stored one replayed to a retry.
fn with_replay_headers(answer: ResponseBuilder) -> ResponseBuilder {
    answer
        .header(
            "Idempotent-Replayed",
            header(
                "`true` when this is the stored answer of an earlier request with this key, replayed; absent otherwise.",
                string().enum_values(Some(["true"])),
            ),
        )
        .header(
            "Idempotent-Original-Trace-Id",
            header(
                "On a replay: the trace id of the request that executed the operation.",
                string().pattern(Some("^[0-9a-f]{32}$")),
            ),
        )
}

/// `X-Once-Region`: only through a router (`once router`), never from a node.
fn with_region_header(answer: ResponseBuilder) -> ResponseBuilder {
    answer.header(
        "X-Once-Region",
        header(
            "Sent by a region's router on every answer it forwarded: the region whose node answered.",
            string(),
        ),
    )
}

/// The link from an answer naming a payment to reading it.
fn read_link(pointer: &str) -> utoipa::openapi::link::Link {
    LinkBuilder::new()
        .operation_id(GET_PAYMENT)
        .parameter("id", format!("$response.body#{pointer}"))
        .description("Read the payment this answer names.")
        .build()
}

fn created() -> Response {
    let answer = ResponseBuilder::new()
        .description(
            "The payment was created and the provider approved it; or, with \
             `Idempotent-Replayed: true`, the stored answer of the operation this key \
             named, byte for byte.",
        )
        .content(
            "application/json",
            json_content(
                payment_body(),
                [
                    (
                        "created".into(),
                        example_of(PaymentStatus::Succeeded, ResponseSchema::V2),
                    ),
                    (
                        "schema1".into(),
                        example_of(PaymentStatus::Succeeded, ResponseSchema::V1),
                    ),
                ],
            ),
        )
        .header(
            "Location",
            header(
                &format!("{ALWAYS_SENT} The payment's URL, `/payments/{{id}}`."),
                string().pattern(Some(format!(
                    "^/payments/{}",
                    PaymentId::pattern().trim_start_matches('^')
                ))),
            ),
        )
        .link("GetPaymentById", read_link("/id"));
    with_region_header(with_replay_headers(with_trace_headers(answer, true))).build()
}

fn read() -> Response {
    let answer = ResponseBuilder::new()
        .description("The payment, rendered with the node's response schema.")
        .content(
            "application/json",
            json_content(
                payment_body(),
                [(
                    "payment".into(),
                    example_of(PaymentStatus::Succeeded, ResponseSchema::V2),
                )],
            ),
        );
    with_region_header(with_trace_headers(answer, true)).build()
}

fn page() -> Response {
    let payment = example_of(PaymentStatus::Succeeded, ResponseSchema::V2);
    let answer = ResponseBuilder::new()
        .description(
            "A page of the tenant's payments in creation order, each exactly as \
             `GET /payments/{id}` renders it; `nextCursor` is `null` on the last page.",
        )
        .content(
            "application/json",
            json_content(
                Ref::from_schema_name("PaymentListV2"),
                [
                    (
                        "a page with more to come".into(),
                        serde_json::json!({
                            "data": [payment],
                            "nextCursor": "1796069196803.pay_019ad9b0c6a97e43b8d33a0b4f6c2e11",
                        }),
                    ),
                    (
                        "the last page".into(),
                        serde_json::json!({ "data": [], "nextCursor": null }),
                    ),
                ],
            ),
        );
    with_region_header(with_trace_headers(answer, true)).build()
}

fn pending() -> Response {
    let body = serde_json::to_value(response::pending(Some(
        "pay_019ad9b0c6a97e43b8d33a0b4f6c2e11",
    )))
    .expect("a pending body is JSON");
    let answer = ResponseBuilder::new()
        .description(
            "The provider's outcome is being recovered; nothing more will be charged. \
             Retry with the same key after `Retry-After`.",
        )
        .content(
            "application/json",
            json_content(
                Ref::from_schema_name("PendingBody"),
                [("processing".into(), body)],
            ),
        )
        .header(
            "Retry-After",
            header(
                &format!("{ALWAYS_SENT} Seconds to wait before the retry."),
                seconds(),
            ),
        )
        .link("GetPaymentById", read_link("/paymentId"));
    with_region_header(with_trace_headers(answer, true)).build()
}

fn declined() -> Response {
    let payment = example_payment(PaymentStatus::Declined);
    let body = serde_json::to_value(response::declined_body(&payment.id, "insufficient_funds"))
        .expect("an error body is JSON");
    let answer = ResponseBuilder::new()
        .description(
            "INSUFFICIENT_FUNDS: the provider declined the payment (it exists, `declined`; \
             `paymentId` names it). Stored: a retry with this key is answered the same.",
        )
        .content(
            "application/json",
            json_content(
                Ref::from_schema_name("ErrorBody"),
                [("INSUFFICIENT_FUNDS".into(), body)],
            ),
        )
        .link("GetPaymentById", read_link("/paymentId"));
    with_region_header(with_replay_headers(with_trace_headers(answer, true))).build()
}

pub(crate) fn headers_too_large() -> Response {
    ResponseBuilder::new()
        .description(
            "The request line and headers are over the server's limits (bytes or count); \
             hyper answers before the routes, with no body.",
        )
        .build()
}

/// Answered by the server around the routes (`once_edge::server`), so
/// without the observe layer's trace headers.
fn before_the_routes(error: &ApiError) -> bool {
    matches!(
        error,
        ApiError::InvalidPath
            | ApiError::Overloaded { .. }
            | ApiError::DeadlineExceeded { .. }
            | ApiError::Internal(_)
    )
}

/// When the answers `made` of `errors` carry header `name`: `None` if
/// never, [`ALWAYS_SENT`] if always, else the codes that do.
fn carried_by(
    errors: &[ApiError],
    made: &[axum::response::Response],
    name: &HeaderName,
) -> Option<String> {
    let carrying: Vec<&ApiError> = errors
        .iter()
        .zip(made)
        .filter(|(_, r)| r.headers().contains_key(name))
        .map(|(e, _)| e)
        .collect();
    let mut codes: Vec<&str> = Vec::new();
    for code in carrying.iter().map(|e| e.code().as_str()) {
        if !codes.contains(&code) {
            codes.push(code);
        }
    }
    match carrying.len() {
        0 => None,
        n if n == errors.len() => Some(ALWAYS_SENT.to_owned()),
        _ => Some(format!("Sent with {}.", codes.join(", "))),
    }
}

/// The refusals of an operation answering `codes`, one response per status;
/// `replayed` lists the statuses a stored answer can have.
pub(crate) fn refusals(codes: &[ErrorCode], replayed: &[u16]) -> BTreeMap<String, RefOr<Response>> {
    let mut by_status: BTreeMap<u16, Vec<ApiError>> = BTreeMap::new();
    for error in ApiError::examples() {
        if codes.contains(&error.code()) {
            by_status
                .entry(error.status_code().as_u16())
                .or_default()
                .push(error);
        }
    }
    by_status
        .into_iter()
        .map(|(status, errors)| {
            // Several errors can share a code (a 503 for an unavailable
            // store and for a missed deadline): each code once.
            let mut status_codes: Vec<ErrorCode> = Vec::new();
            for code in errors.iter().map(ApiError::code) {
                if !status_codes.contains(&code) {
                    status_codes.push(code);
                }
            }
            let description = format!(
                "{}: {}",
                status_codes
                    .iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            let examples: Vec<(String, serde_json::Value)> = errors
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let name = if errors.iter().filter(|o| o.code() == e.code()).count() > 1 {
                        format!("{}_{i}", e.code().as_str())
                    } else {
                        e.code().as_str().to_owned()
                    };
                    (
                        name,
                        serde_json::to_value(e.body()).expect("an error body is JSON"),
                    )
                })
                .collect();
            let always_traced = !errors.iter().any(before_the_routes);
            let mut answer = ResponseBuilder::new().description(description).content(
                "application/json",
                json_content(Ref::from_schema_name("ErrorBody"), examples),
            );
            // The headers each error's own answer carries, required when all do.
            let made: Vec<axum::response::Response> = ApiError::examples()
                .into_iter()
                .filter(|e| codes.contains(&e.code()) && e.status_code().as_u16() == status)
                .map(IntoResponse::into_response)
                .collect();
            let retry_after = carried_by(&errors, &made, &axum::http::header::RETRY_AFTER);
            if let Some(sent) = retry_after {
                answer = answer.header(
                    "Retry-After",
                    header(
                        &format!("{sent} Seconds to wait before a retry with the same key."),
                        seconds(),
                    ),
                );
            }
            let home = HeaderName::from_static(crate::error::HOME_REGION_HEADER);
            if let Some(sent) = carried_by(&errors, &made, &home) {
                answer = answer.header(
                    "X-Once-Home-Region",
                    header(&format!("{sent} The tenant's home region."), string()),
                );
            }
            answer = with_region_header(with_trace_headers(answer, always_traced));
            if replayed.contains(&status) {
                answer = with_replay_headers(answer);
            }
            (status.to_string(), answer.build().into())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use utoipa::IntoResponses;

    #[test]
    fn every_status_an_operation_answers_is_documented_with_its_codes() {
        let create = CreateAnswers::responses();
        for status in [
            "201", "202", "400", "401", "402", "403", "408", "409", "413", "421", "422", "429",
            "431", "500", "503",
        ] {
            assert!(create.contains_key(status), "POST /payments {status}");
        }
        let fetch = FetchAnswers::responses();
        for status in [
            "200", "400", "401", "403", "404", "429", "431", "500", "503",
        ] {
            assert!(fetch.contains_key(status), "GET /payments/{{id}} {status}");
        }
        assert!(!fetch.contains_key("409") && !create.contains_key("404"));
    }
}
