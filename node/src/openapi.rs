//! The OpenAPI document served at `/openapi.json`: exactly what the server
//! enforces and answers, generated from the code so it cannot drift.
//!
//! Layout:
//!
//! - the handlers' `#[utoipa::path]` annotations ([`crate::routes`]) name
//!   each operation, its parameters, body and answers;
//! - the header parameters are [`crate::payments::headers`], beside their
//!   parsing; the schemas' patterns, lengths and enums sit beside what they
//!   describe (`payments::command::schema`, `payments::response::schema`),
//!   made from the validators' constants;
//! - every answer per status, with its error codes, headers, examples and
//!   links, is [`crate::payments::answers`];
//! - here: the components, the bearer scheme, the body's currency/amount
//!   pairing ([`ExactRequestBody`]), the enums every schema shares
//!   ([`SharedEnums`]) and the `required` flag of response headers
//!   ([`document`]).
//!
//! The document is what clients in other languages are generated from
//! (`tests/clients/run.sh`, `openapi-python-client` and `openapi-typescript`
//! in CI), so it names a thing once: one error body (`ErrorBody`, its
//! `errorCode` the one `ErrorCode` enum), one `PaymentStatus`, one
//! `Channel`; no enum lists a value twice (a generator names members after
//! values, and stops at a repeat); operation ids are verbs on the resource
//! (`createPayment`, `getPayment`, `listPayments`).

use serde_json::Value;
use utoipa::openapi::RefOr;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::error::{ErrorBody, ErrorCode};
use crate::payments::answers::ALWAYS_SENT;
use crate::payments::command::PaymentRequest;
use crate::payments::listing::PaymentListV2;
use crate::payments::response::{AmountV2, PaymentV1, PaymentV2, PendingBody};
use crate::webhook_routes;

#[derive(OpenApi)]
#[openapi(
    info(title = "once", description = "Exactly-once payments API. Every error is `{errorCode, message}` with a stable code from `ErrorCode`; see docs/api.md. Every route also answers `404 NOT_FOUND` to an unknown path and `405 METHOD_NOT_ALLOWED` (with `Allow`) to a method it does not take."),
    paths(
        crate::routes::create,
        crate::routes::fetch,
        crate::lookups::list,
        webhook_routes::create,
        webhook_routes::list,
        webhook_routes::remove,
        webhook_routes::rotate,
        webhook_routes::list_events
    ),
    components(schemas(
        PaymentRequest,
        PaymentV1,
        PaymentV2,
        AmountV2,
        PendingBody,
        PaymentListV2,
        ErrorBody,
        ErrorCode,
        webhook_routes::WebhookEndpointRequest,
        webhook_routes::WebhookEndpoint,
        webhook_routes::WebhookEndpointList,
        webhook_routes::Event,
        webhook_routes::EventList
    )),
    modifiers(&BearerAuth, &ExactRequestBody, &SharedEnums),
    tags(
        (name = "payments", description = "Create and read payments"),
        (name = "webhooks", description = "Webhook endpoints and the events they are sent")
    )
)]
#[derive(Debug)]
pub struct ApiDoc;

/// The document as served: [`ApiDoc`] with two things utoipa 5 cannot say
/// fixed in every response: each header whose description starts with
/// [`ALWAYS_SENT`] is marked `required` (its `Header` has no such field),
/// and links name their fields as OpenAPI does (`operationId`; utoipa
/// 5.5's `Link` serializes `operation_id`, which no reader recognizes).
pub fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the API document is JSON");
    let operations = doc
        .get_mut("paths")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|paths| paths.values_mut())
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.values_mut());
    for operation in operations {
        let responses = operation
            .get_mut("responses")
            .and_then(Value::as_object_mut)
            .into_iter()
            .flat_map(|responses| responses.values_mut());
        for response in responses {
            let headers = response
                .get_mut("headers")
                .and_then(Value::as_object_mut)
                .into_iter()
                .flat_map(|headers| headers.values_mut());
            for header in headers {
                let always = header
                    .get("description")
                    .and_then(Value::as_str)
                    .is_some_and(|d| d.starts_with(ALWAYS_SENT));
                if always {
                    header["required"] = Value::Bool(true);
                }
            }
            let links = response
                .get_mut("links")
                .and_then(Value::as_object_mut)
                .into_iter()
                .flat_map(|links| links.values_mut())
                .filter_map(Value::as_object_mut);
            for link in links {
                for (snake, camel) in [
                    ("operation_id", "operationId"),
                    ("operation_ref", "operationRef"),
                    ("request_body", "requestBody"),
                ] {
                    if let Some(value) = link.remove(snake) {
                        link.insert(camel.into(), value);
                    }
                }
            }
        }
    }
    doc
}

#[derive(Debug)]
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.description = Some(
            "`Authorization: Bearer <API key>`; the key names the tenant and principal. \
             A missing or unknown key is 401 UNAUTHORIZED, before the body is read."
                .into(),
        );
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// The request body's fields come from `PaymentRequest`'s derive; which
/// amounts a currency takes depends on that currency's exponent, a
/// constraint across two fields, added here as an `allOf` with the
/// pairing.
#[derive(Debug)]
struct ExactRequestBody;

impl Modify for ExactRequestBody {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        if let Some(fields) = components.schemas.remove("PaymentRequest") {
            components.schemas.insert(
                "PaymentRequest".into(),
                RefOr::T(crate::payments::command::schema::payment_request(fields)),
            );
        }
    }
}

/// `PaymentStatus`, `Channel` and `ApiVersion` as components of their own,
/// which the payment renderings, the request body and the `Api-Version`
/// header refer to: inline, each field would be an enum type of its own in
/// a generated client (`PaymentV1Status`, `PaymentV2Status`, …) for what is
/// one set of values.
#[derive(Debug)]
struct SharedEnums;

impl Modify for SharedEnums {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use crate::payments::headers;
        use crate::payments::response::schema;
        let components = openapi.components.get_or_insert_with(Default::default);
        for (name, enumeration) in [
            (schema::PAYMENT_STATUS, schema::payment_status()),
            (schema::CHANNEL, schema::channel()),
            (headers::API_VERSION_SCHEMA, headers::api_version_schema()),
        ] {
            components
                .schemas
                .insert(name.into(), RefOr::T(enumeration.into()));
        }
    }
}
