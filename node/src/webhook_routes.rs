//! `POST /webhook-endpoints`, `GET /webhook-endpoints`, `DELETE
//! /webhook-endpoints/{id}`, `POST /webhook-endpoints/{id}/rotate-secret`
//! and `GET /events`, each for the tenant of the API key. The handlers own
//! the request's edges; the tables are [`crate::webhooks::endpoints`] and
//! [`crate::webhooks::deliveries`].
//!
//! In the `raft` store mode every route answers `501 NOT_IMPLEMENTED`
//! (decision 0091): an endpoint must be where every region can read it
//! after a failover, and raft-store holds no webhook state yet.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tracing::instrument;
use utoipa::ToSchema;
use utoipa::openapi::response::Response as DocResponse;
use utoipa::openapi::{RefOr, ResponseBuilder};

use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode};
use crate::payments::answers::{headers_too_large, refusals};
use crate::payments::response::rfc3339;
use crate::state::AppState;
use crate::webhooks::endpoints::{self, Endpoint, MAX_PER_TENANT, WILDCARD};
use crate::webhooks::{Webhooks, retention};

/// A URL's longest form: any request the document allows, and any one that
/// breaks only this bound (even in 4-byte characters, JSON-escaped), stays
/// within the 16 KiB body limit, so it is refused as what it is (422), not as
/// too large.
const MAX_URL: usize = 1024;
const MAX_EVENTS: usize = 32;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/webhook-endpoints", post(create).get(list))
        .route("/webhook-endpoints/{id}", delete(remove))
        .route("/webhook-endpoints/{id}/rotate-secret", post(rotate))
        .route("/events", get(list_events))
}

/// The body of `POST /webhook-endpoints`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookEndpointRequest {
    /// Where events are POSTed: an `http` or `https` URL, host a DNS name
    /// or an IPv4 address, no credentials.
    #[schema(schema_with = url_schema)]
    pub url: String,
    /// Event types to deliver (`payment.succeeded`, …), or `["*"]` for all.
    #[schema(schema_with = events_schema)]
    pub events: Vec<String>,
}

/// What an endpoint's URL may be; the server accepts exactly this (and
/// the document states it), so a URL that parses differently elsewhere
/// is never stored. Hostname labels start with a letter and have no
/// `--`, so none is numeric or punycode that would not parse.
pub const URL_PATTERN: &str = concat!(
    "^https?://",
    "([a-z]([a-z0-9]|-[a-z0-9]){0,62}(\\.[a-z]([a-z0-9]|-[a-z0-9]){0,62})*",
    "|((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9]))",
    "(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?",
    "(/[A-Za-z0-9._~-]*)*",
    "(\\?[A-Za-z0-9._~=&-]*)?$"
);

/// What an event type in `events` may be.
pub const EVENT_TYPE_PATTERN: &str = "^(\\*|[a-z_]+(\\.[a-z_]+)+)$";

fn url_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .pattern(Some(URL_PATTERN))
        .max_length(Some(MAX_URL))
        .examples([serde_json::json!("https://merchant.example/webhooks/once")])
        .build()
}

fn events_schema() -> utoipa::openapi::Array {
    let item = utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .pattern(Some(EVENT_TYPE_PATTERN))
        .max_length(Some(64))
        .build();
    utoipa::openapi::ArrayBuilder::new()
        .items(item)
        .min_items(Some(1))
        .max_items(Some(MAX_EVENTS))
        .examples([serde_json::json!(["payment.succeeded", "payment.declined"])])
        .build()
}

/// A webhook endpoint. `secret` appears only in the answer that made it
/// (creation or rotation).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookEndpoint {
    /// Always `webhook_endpoint`.
    #[schema(example = "webhook_endpoint")]
    pub object: String,
    #[schema(example = "we_019ad9b0c6a97e43b8d33a0b4f6c2e11")]
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    #[schema(example = "2026-12-07T16:00:00.000Z")]
    pub created_at: String,
    /// The signing secret, shown once: keep it, it is never shown again.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "whsec_3f0c…")]
    pub secret: Option<String>,
    /// Until when the secret before the last rotation still signs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_secret_expires_at: Option<String>,
}

/// The tenant's webhook endpoints.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookEndpointList {
    pub data: Vec<WebhookEndpoint>,
}

/// One event, exactly as webhooks deliver it (the signed body).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Always `event`.
    pub object: String,
    /// Stable across every delivery attempt: deduplicate on it.
    #[schema(example = "evt_019ad9b0c6a97e43b8d33a0b4f6c2e11")]
    pub id: String,
    #[schema(rename = "type", example = "payment.succeeded")]
    #[serde(rename = "type")]
    pub event_type: String,
    pub created_at: String,
    /// The event's data (for `payment.*`, the payment's facts).
    pub data: serde_json::Value,
}

/// A page of the tenant's events of the last 30 days.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventList {
    pub data: Vec<Event>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

fn rendered(endpoint: &Endpoint, secret: Option<String>) -> WebhookEndpoint {
    WebhookEndpoint {
        object: "webhook_endpoint".into(),
        id: endpoint.id.clone(),
        url: endpoint.url.clone(),
        events: endpoint.events.clone(),
        created_at: rfc3339(endpoint.created_at),
        secret,
        previous_secret_expires_at: endpoint.previous_expires_at.map(rfc3339),
    }
}

fn webhooks(state: &AppState) -> Result<&Webhooks, ApiError> {
    let webhooks = &state.webhooks;
    match webhooks.unavailable {
        Some(why) => Err(ApiError::NotImplemented(why.into())),
        None => Ok(webhooks),
    }
}

fn unavailable(e: anyhow::Error) -> ApiError {
    ApiError::Unavailable(e)
}

/// Parses and checks a create body: a URL we can POST to (on the public
/// internet unless `allow_private` — `crate::webhooks::targets`), event
/// types that could exist.
fn parse_request(body: &[u8], allow_private: bool) -> Result<(String, Vec<String>), ApiError> {
    let request: WebhookEndpointRequest =
        serde_json::from_slice(body).map_err(|e| ApiError::MalformedJson(e.to_string()))?;
    if request.url.len() > MAX_URL {
        return Err(ApiError::InvalidCommand(format!(
            "url: longer than {MAX_URL} bytes"
        )));
    }
    let pattern = regex::Regex::new(URL_PATTERN).expect("the URL pattern compiles");
    if !pattern.is_match(&request.url) {
        return Err(ApiError::InvalidCommand(format!(
            "url: must be an http or https URL with a DNS name or IPv4 host (pattern {URL_PATTERN})"
        )));
    }
    let url = url::Url::parse(&request.url)
        .map_err(|e| ApiError::InvalidCommand(format!("url: not an absolute URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(ApiError::InvalidCommand(
            "url: must be an http or https URL with a host".into(),
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ApiError::InvalidCommand(
            "url: must not carry credentials".into(),
        ));
    }
    if !allow_private && let Some(why) = crate::webhooks::targets::refused_host(&url) {
        return Err(ApiError::InvalidCommand(why));
    }
    if request.events.is_empty() || request.events.len() > MAX_EVENTS {
        return Err(ApiError::InvalidCommand(format!(
            "events: give 1 to {MAX_EVENTS} event types"
        )));
    }
    let mut events: Vec<String> = Vec::new();
    for event in request.events {
        if !is_event_type(&event) {
            return Err(ApiError::InvalidCommand(format!(
                "events: {event:?} is not an event type (`noun.verb`, lower case) or \"*\""
            )));
        }
        if !events.contains(&event) {
            events.push(event);
        }
    }
    if events.iter().any(|e| e == WILDCARD) {
        events = vec![WILDCARD.into()];
    }
    Ok((request.url, events))
}

/// `*`, or dot-separated lower-case words (`payment.succeeded`).
fn is_event_type(s: &str) -> bool {
    // The same as EVENT_TYPE_PATTERN, and 64 bytes at most.
    s == WILDCARD
        || (s.len() <= 64
            && s.contains('.')
            && s.split('.')
                .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')))
}

/// Register a webhook endpoint; its signing secret is in this answer only.
#[utoipa::path(
    post,
    path = "/webhook-endpoints",
    operation_id = "createWebhookEndpoint",
    tag = "webhooks",
    request_body(content = WebhookEndpointRequest, content_type = "application/json"),
    responses(CreateEndpointAnswers),
    security(("bearer" = []))
)]
#[instrument(name = "create a webhook endpoint", skip_all)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let webhooks = webhooks(&state)?;
    let body = once_edge::body::read(body, &headers, state.config.body_limit).await?;
    let (url, events) = parse_request(&body, webhooks.config.allow_private_targets)?;
    let now = webhooks.clock.now();
    let made = endpoints::create(
        &webhooks.db,
        &webhooks.data_keys,
        &caller.tenant,
        &url,
        &events,
        now,
    )
    .await
    .map_err(unavailable)?;
    let Some((endpoint, secret)) = made else {
        return Err(ApiError::InvalidCommand(format!(
            "url: a tenant has at most {MAX_PER_TENANT} webhook endpoints"
        )));
    };
    Ok((StatusCode::CREATED, Json(rendered(&endpoint, Some(secret)))).into_response())
}

/// List the tenant's webhook endpoints, oldest first (secrets never shown).
#[utoipa::path(
    get,
    path = "/webhook-endpoints",
    operation_id = "listWebhookEndpoints",
    tag = "webhooks",
    responses(ListEndpointAnswers),
    security(("bearer" = []))
)]
#[instrument(name = "list webhook endpoints", skip_all)]
pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    let webhooks = webhooks(&state)?;
    let now = webhooks.clock.now();
    let endpoints = endpoints::list(&webhooks.db, &caller.tenant, now)
        .await
        .map_err(unavailable)?;
    let data = endpoints.iter().map(|e| rendered(e, None)).collect();
    Ok(Json(WebhookEndpointList { data }).into_response())
}

/// Delete a webhook endpoint: no event goes to it after this answer.
#[utoipa::path(
    delete,
    path = "/webhook-endpoints/{id}",
    operation_id = "deleteWebhookEndpoint",
    tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint's id (`we_…`).")),
    responses(DeleteEndpointAnswers),
    security(("bearer" = []))
)]
#[instrument(name = "delete a webhook endpoint", skip_all)]
pub async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let webhooks = webhooks(&state)?;
    let now = webhooks.clock.now();
    if endpoints::delete(&webhooks.db, &caller.tenant, &id, now)
        .await
        .map_err(unavailable)?
    {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::NotFound)
    }
}

/// Issue a new signing secret; the old one keeps signing beside it for
/// the overlap window (24 h by default), so receivers can switch over.
#[utoipa::path(
    post,
    path = "/webhook-endpoints/{id}/rotate-secret",
    operation_id = "rotateWebhookSecret",
    tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint's id (`we_…`).")),
    responses(RotateAnswers),
    security(("bearer" = []))
)]
#[instrument(name = "rotate a webhook secret", skip_all)]
pub async fn rotate(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let webhooks = webhooks(&state)?;
    let now = webhooks.clock.now();
    let rotated = endpoints::rotate(
        &webhooks.db,
        &webhooks.data_keys,
        &caller.tenant,
        &id,
        now,
        webhooks.config.rotation_overlap,
    )
    .await
    .map_err(unavailable)?;
    match rotated {
        Some((endpoint, secret)) => Ok(Json(rendered(&endpoint, Some(secret))).into_response()),
        None => Err(ApiError::NotFound),
    }
}

/// The tenant's events of the last 30 days in creation order, a page at a
/// time: for reconciling what webhooks delivered.
#[utoipa::path(
    get,
    path = "/events",
    operation_id = "listEvents",
    tag = "webhooks",
    params(EventParams),
    responses(ListEventAnswers),
    security(("bearer" = []))
)]
#[instrument(name = "list events", skip_all)]
pub async fn list_events(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let webhooks = webhooks(&state)?;
    let (limit, after) = parse_event_query(query.as_deref())?;
    let now = webhooks.clock.now();
    let since = retention::kept_since(now).0;
    let (after_at, after_id) = after.unwrap_or((i64::MIN, String::new()));
    let rows = sqlx::query(
        "SELECT event_id, event_type, data, created_at FROM webhook_events \
         WHERE tenant_id = $1 AND created_at >= $2 AND (created_at > $3 OR (created_at = $3 AND event_id > $4)) \
         ORDER BY created_at, event_id LIMIT $5",
    )
    .bind(caller.tenant.as_str())
    .bind(since)
    .bind(after_at)
    .bind(&after_id)
    .bind(i64::from(limit) + 1)
    .fetch_all(&webhooks.db.pool)
    .await
    .map_err(|e| unavailable(e.into()))?;
    let mut events = rows
        .iter()
        .map(crate::webhooks::deliveries::event_of)
        .collect::<anyhow::Result<Vec<_>>>()
        .map_err(unavailable)?;
    let more = events.len() > limit as usize;
    events.truncate(limit as usize);
    let next = more
        .then(|| {
            events
                .last()
                .map(|e| format!("{}.{}", e.created_at.0, e.event_id))
        })
        .flatten();
    let mut body = b"{\"data\":[".to_vec();
    for (i, event) in events.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&event.render());
    }
    body.extend_from_slice(b"],\"nextCursor\":");
    body.extend_from_slice(
        serde_json::to_string(&next)
            .expect("a string serializes")
            .as_bytes(),
    );
    body.push(b'}');
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

const EVENT_CURSOR_PATTERN: &str = "^[0-9]{1,15}\\.evt_[0-9a-f]{32}$";

fn parse_event_query(query: Option<&str>) -> Result<(u32, Option<(i64, String)>), ApiError> {
    let invalid = |p: &str, why: &str| ApiError::InvalidCommand(format!("{p}: {why}"));
    let (mut limit, mut cursor) = (None, None);
    for (name, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let slot = match name.as_ref() {
            "limit" => &mut limit,
            "cursor" => &mut cursor,
            other => {
                return Err(invalid(
                    other,
                    "unknown parameter; expected limit or cursor",
                ));
            }
        };
        if slot.replace(value.into_owned()).is_some() {
            return Err(invalid(&name, "given more than once"));
        }
    }
    let limit = match limit {
        None => 20,
        Some(raw) => raw
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| invalid("limit", "must be an integer from 1 to 100"))?,
    };
    let after = match cursor {
        None => None,
        Some(c) => {
            let pattern =
                regex::Regex::new(EVENT_CURSOR_PATTERN).expect("the cursor pattern compiles");
            if !pattern.is_match(&c) {
                return Err(invalid("cursor", "is not a cursor from a previous page"));
            }
            let (at, id) = c.split_once('.').expect("matched the pattern");
            let at = at
                .parse::<i64>()
                .map_err(|_| invalid("cursor", "is not a cursor from a previous page"))?;
            Some((at, id.to_owned()))
        }
    };
    Ok((limit, after))
}

/// `GET /events`'s query parameters.
#[derive(Debug)]
pub struct EventParams;

impl utoipa::IntoParams for EventParams {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
        use utoipa::openapi::{ObjectBuilder, Required, Type};
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
                "limit",
                "Events per page.",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1))
                    .maximum(Some(100))
                    .default(Some(20.into()))
                    .build(),
            ),
            query(
                "cursor",
                "`nextCursor` of the previous page, passed back as it is.",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(EVENT_CURSOR_PATTERN))
                    .build(),
            ),
        ]
    }
}

const EDGE: &[ErrorCode] = &[
    ErrorCode::Unauthorized,
    ErrorCode::Forbidden,
    ErrorCode::RateLimited,
    ErrorCode::InternalError,
    ErrorCode::ServiceUnavailable,
    ErrorCode::ServiceOverloaded,
    ErrorCode::NotImplemented,
];

fn answers(extra: &[ErrorCode], ok: (&str, DocResponse)) -> BTreeMap<String, RefOr<DocResponse>> {
    let codes: Vec<ErrorCode> = EDGE.iter().chain(extra).copied().collect();
    let mut answers = refusals(&codes, &[]);
    answers.insert(ok.0.into(), ok.1.into());
    answers.insert("431".into(), headers_too_large().into());
    answers
}

fn json_answer(description: &str, schema: &str) -> DocResponse {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            utoipa::openapi::ContentBuilder::new()
                .schema(Some(utoipa::openapi::Ref::from_schema_name(schema)))
                .build(),
        )
        .build()
}

macro_rules! answers_of {
    ($name:ident, $extra:expr, $status:literal, $answer:expr) => {
        #[derive(Debug)]
        pub struct $name;
        impl utoipa::IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<DocResponse>> {
                answers($extra, ($status, $answer))
            }
        }
    };
}

answers_of!(
    CreateEndpointAnswers,
    &[
        ErrorCode::ValidationFailed,
        ErrorCode::PayloadTooLarge,
        ErrorCode::RequestTimeout
    ],
    "201",
    json_answer(
        "The endpoint, with its signing secret (shown only here).",
        "WebhookEndpoint"
    )
);
answers_of!(
    ListEndpointAnswers,
    &[],
    "200",
    json_answer(
        "The tenant's endpoints, oldest first, without secrets.",
        "WebhookEndpointList"
    )
);
answers_of!(
    DeleteEndpointAnswers,
    &[ErrorCode::NotFound, ErrorCode::InvalidPath],
    "204",
    ResponseBuilder::new().description("Deleted.").build()
);
answers_of!(
    RotateAnswers,
    &[ErrorCode::NotFound, ErrorCode::InvalidPath],
    "200",
    json_answer(
        "The endpoint with its new secret (shown only here) and until when the old one still signs.",
        "WebhookEndpoint"
    )
);
answers_of!(
    ListEventAnswers,
    &[ErrorCode::ValidationFailed],
    "200",
    json_answer(
        "A page of the tenant's events of the last 30 days, in creation order.",
        "EventList"
    )
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_types_are_dotted_lower_case_words_or_the_wildcard() {
        for ok in ["*", "payment.succeeded", "refund.failed", "a_b.c"] {
            assert!(is_event_type(ok), "{ok}");
        }
        for bad in [
            "",
            "payment",
            "Payment.succeeded",
            "payment.",
            ".x",
            "payment.*",
            "a b.c",
        ] {
            assert!(!is_event_type(bad), "{bad}");
        }
    }

    #[test]
    fn a_create_body_is_checked_before_anything_is_stored() {
        let ok = br#"{"url":"https://m.example/hook","events":["payment.succeeded","*"]}"#;
        assert_eq!(
            parse_request(ok, false).unwrap(),
            ("https://m.example/hook".into(), vec!["*".into()])
        );
        // This machine's network: refused unless the node allows it.
        let inward = br#"{"url":"http://127.0.0.1:9000/hook","events":["*"]}"#;
        match parse_request(inward, false) {
            Err(ApiError::InvalidCommand(why)) => {
                assert!(why.contains("not a public address"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        assert!(parse_request(inward, true).is_ok());
        for bad in [
            &br#"{"url":"ftp://m.example","events":["*"]}"#[..],
            br#"{"url":"https://u:p@m.example","events":["*"]}"#,
            br#"{"url":"https://m.example","events":[]}"#,
            br#"{"url":"https://m.example","events":["nope"]}"#,
            br#"{"url":"https://m.example","events":["*"],"extra":1}"#,
            br#"{"url":"/relative","events":["*"]}"#,
            br#"{"url":"https://a.0x1/","events":["*"]}"#,
            br#"{"url":"https://xn--a.example/","events":["*"]}"#,
            br#"{"url":"https://m.example:70000/","events":["*"]}"#,
        ] {
            assert!(
                parse_request(bad, true).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn every_url_the_pattern_allows_parses_and_the_tests_urls_match() {
        let pattern = regex::Regex::new(URL_PATTERN).unwrap();
        for ok in [
            "http://127.0.0.1:65535/hook",
            "https://merchant.example/webhooks/once?x=1",
            "https://a-b.c/",
            "http://localhost",
        ] {
            assert!(pattern.is_match(ok), "{ok}");
            assert!(url::Url::parse(ok).is_ok(), "{ok}");
        }
        let event = regex::Regex::new(EVENT_TYPE_PATTERN).unwrap();
        for (s, ok) in [
            ("*", true),
            ("payment.succeeded", true),
            ("payment", false),
            ("a.*", false),
        ] {
            assert_eq!(event.is_match(s), ok, "{s}");
            assert_eq!(is_event_type(s), ok, "{s}");
        }
    }

    #[test]
    fn an_event_cursor_is_its_time_and_id() {
        let (_, after) = parse_event_query(Some(
            "cursor=1700000000000.evt_0123456789abcdef0123456789abcdef",
        ))
        .unwrap();
        assert_eq!(
            after,
            Some((
                1_700_000_000_000,
                "evt_0123456789abcdef0123456789abcdef".into()
            ))
        );
        assert!(parse_event_query(Some("cursor=1.pay_x")).is_err());
        assert!(parse_event_query(Some("limit=0")).is_err());
        assert!(parse_event_query(Some("type=x")).is_err());
    }
}
