//! The operator console: one page at `/console` on the router's admin
//! listener that shows the system's state and refreshes it every two
//! seconds — regions in the failover state machine ([`phase`]), raft-store
//! members (leader, term, commit and apply lag), tenants (home, standbys,
//! placement epoch), records that need an operator with the resolve action
//! and its audit trail ([`records`]), the failback action for a region
//! awaiting it and its audit trail ([`failback`]), and recent failover and
//! chaos drill reports ([`drills`]).
//!
//! | route | |
//! |---|---|
//! | `GET /console`, `/console/app.js`, `/console/app.css`, `/console/favicon.svg` | the page; assets compiled into the binary |
//! | `GET /console/api/state` | everything the page shows ([`snapshot::ConsoleState`]) |
//! | `POST /console/api/resolve` | `{region, tenant, principal, key, outcome, reason, actor}` → the node's resolve |
//! | `POST /console/api/failback` | `{region, actor, reason}` → `POST /admin/failback`'s move, audited |
//!
//! The page and its script hold no data: every byte of state comes from
//! `/console/api/*`, behind the admin token like every operator endpoint.
//! The page takes the token from the URL's fragment (`#token=…`, which no
//! browser sends to a server or writes to a log; `once up` prints such a
//! URL) or asks for it, keeps it in the tab's session storage and presents
//! it as a bearer token. A router without an admin token has no console
//! (404). The page runs under a strict content security policy: no inline
//! script or style, no other origin, no framing.
//!
//! The admin token is one shared credential, so the console cannot know
//! who is at the keyboard: a resolve or failback action carries the actor
//! the operator names and a reason, both required. The node writes a
//! resolve's into its audit trail in the same transaction as the verdict;
//! the router keeps a failback's in its own trail and log ([`crate::audit`]),
//! granted or refused.

pub mod drills;
pub mod failback;
pub mod phase;
pub mod records;
pub mod snapshot;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use once_edge::ApiError;

use crate::admin::Operator;
use crate::state::SharedState;
use records::ResolveAction;

const PAGE: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/app.js");
const STYLE: &str = include_str!("../console/app.css");
const ICON: &str = include_str!("../console/favicon.svg");

const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                      connect-src 'self'; img-src 'self'; base-uri 'none'; \
                      form-action 'none'; frame-ancestors 'none'";

pub fn router() -> Router<SharedState> {
    Router::new()
        .route("/console", get(page))
        .route("/console/app.js", get(script))
        .route("/console/app.css", get(style))
        .route("/console/favicon.svg", get(icon))
        .route("/console/api/state", get(state))
        .route("/console/api/resolve", post(resolve))
        .route("/console/api/failback", post(fail_back))
}

/// An asset, or 404 when the router has no admin token (no console).
fn asset(state: &SharedState, content_type: &'static str, body: &'static str) -> Response {
    if state.config.admin_token.is_none() {
        return ApiError::NotFound.into_response();
    }
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn page(State(state): State<SharedState>) -> Response {
    asset(&state, "text/html; charset=utf-8", PAGE)
}

async fn script(State(state): State<SharedState>) -> Response {
    asset(&state, "text/javascript; charset=utf-8", SCRIPT)
}

async fn style(State(state): State<SharedState>) -> Response {
    asset(&state, "text/css; charset=utf-8", STYLE)
}

async fn icon(State(state): State<SharedState>) -> Response {
    asset(&state, "image/svg+xml", ICON)
}

async fn state(_: Operator, State(state): State<SharedState>) -> Response {
    let mut response = Json(snapshot::gather(&state).await).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[tracing::instrument(name = "operator resolves a record from the console", skip_all,
    fields(region = %action.region, tenant = %action.tenant, key = %action.key, outcome = %action.outcome))]
async fn resolve(
    _: Operator,
    State(state): State<SharedState>,
    Json(action): Json<ResolveAction>,
) -> Result<Response, ApiError> {
    let admins = state.config.node_admins.as_ref().ok_or_else(|| {
        ApiError::InvalidCommand("this router has no --node-admins to resolve through".into())
    })?;
    if !admins.contains(&action.region) {
        return Err(ApiError::InvalidCommand(format!(
            "region: no node admin listener for {:?}",
            action.region
        )));
    }
    tracing::warn!(actor = %action.actor, reason = %action.reason, "resolve requested from the console");
    let answer = records::resolve(&state, admins, &action)
        .await
        .map_err(ApiError::Unavailable)?;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    Ok((
        status,
        [(header::CONTENT_TYPE, "application/json")],
        answer.body,
    )
        .into_response())
}

#[tracing::instrument(name = "operator fails a region back from the console", skip_all,
    fields(region = %action.region))]
async fn fail_back(
    _: Operator,
    State(state): State<SharedState>,
    Json(action): Json<failback::FailbackAction>,
) -> Result<Json<crate::failover::MoveReport>, ApiError> {
    // Refused before anything moves, and not audited: nothing was asked.
    let action = action.validated().map_err(ApiError::InvalidCommand)?;
    let moved = crate::admin::fail_back(&state, &action.region).await;
    let outcome = match &moved {
        Ok(_) => "failed back".to_owned(),
        Err(e) => format!("refused: {} {e}", e.code().as_str()),
    };
    state.failbacks.record(
        &action.region,
        &action.actor,
        &action.reason,
        outcome,
        moved.as_ref().map_or(0, |m| m.moved.len()),
    );
    moved.map(Json)
}
