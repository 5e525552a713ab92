//! Operator endpoints, on the admin listener behind the admin token
//! (`ONCE_ADMIN_TOKEN`):
//! list and show idempotency records, and resolve by hand an operation whose
//! provider outcome stayed unknown. Every resolution is written with an
//! audit entry (who, when, why) in the same transaction. The `once records`
//! command is the client.
//!
//! | route | |
//! |---|---|
//! | `GET /admin/records?status=unknown&limit=N` | records in a status |
//! | `GET /admin/records/{tenant}/{key}` | every principal's record for a key |
//! | `POST /admin/records/{tenant}/{principal}/{key}/resolve` | `{outcome, reason, actor}` |
//! | `GET /admin/resolutions?limit=N` | the audit trail, newest first |
//! | `GET /admin/keys` | the data keys in use (ids only) and what older keys still seal |
//! | `POST /admin/keys/reseal` | re-read the key file and re-seal now, without waiting for the worker |
//!
//! Stored response bodies are sensitive data: they are shown only here.

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::domain::{IdempotencyKey, PrincipalId, TenantId};
use crate::engine::execute::OPERATION;
use crate::engine::resolve::{ResolveError, Verdict, resolve_unknown};
use crate::error::ApiError;
use crate::idempotency::{Record, Scope, Status};
use crate::state::AppState;
use crate::store::{AuditEntry, ResolvedOutcome, StoreError};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/admin/records", get(list))
        .route("/admin/records/{tenant}/{key}", get(show))
        .route(
            "/admin/records/{tenant}/{principal}/{key}/resolve",
            post(resolve),
        )
        .route("/admin/resolutions", get(resolutions))
        .route("/admin/keys", get(keys))
        .route("/admin/keys/reseal", post(reseal))
}

/// The data keys as an operator sees them (ids, never key material), and
/// whether the older ones may be retired (`stale` is 0).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeysView {
    /// Every key id in the file, oldest first.
    pub keys: Vec<String>,
    /// The key new blobs are sealed under.
    pub sealing_key: String,
    /// Records still sealed under an older key.
    pub stale: u64,
    /// Stored answers per key id (the `sql` mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_key: Option<std::collections::BTreeMap<String, u64>>,
    /// Records re-sealed by this request (`POST /admin/keys/reseal`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resealed: Option<u64>,
}

async fn keys_view(state: &AppState, resealed: Option<u64>) -> Result<KeysView, ApiError> {
    let count = state
        .store
        .reencryption
        .sealed_count()
        .await
        .map_err(unavailable)?;
    let ring = state.data_keys.ring();
    Ok(KeysView {
        keys: ring.key_ids().into_iter().map(str::to_owned).collect(),
        sealing_key: ring.sealing_key_id().to_owned(),
        stale: count.stale,
        by_key: count.by_key,
        resealed,
    })
}

async fn keys(State(state): State<AppState>, _: Operator) -> Result<Json<KeysView>, ApiError> {
    Ok(Json(keys_view(&state, None).await?))
}

async fn reseal(State(state): State<AppState>, _: Operator) -> Result<Json<KeysView>, ApiError> {
    // A file that does not parse keeps the keys in use: say so.
    state
        .data_keys
        .reload_if_changed()
        .map_err(|e| ApiError::InvalidCommand(format!("{e:#}")))?;
    let n = crate::reencryption::reseal_once(&state)
        .await
        .map_err(|e| ApiError::Unavailable(e.context("re-encryption")))?;
    Ok(Json(keys_view(&state, Some(n)).await?))
}

/// Proof that the caller presented the admin token.
#[derive(Debug)]
pub struct Operator;

impl FromRequestParts<AppState> for Operator {
    type Rejection = once_edge::admin::AdminRefusal;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        once_edge::admin::check_operator(
            state.config.admin_token.as_ref(),
            &parts.headers,
            &parts.extensions,
        )?;
        Ok(Operator)
    }
}

/// A record as operators see it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordView {
    pub tenant: String,
    pub principal: String,
    pub operation: String,
    pub key: String,
    pub status: String,
    pub step: String,
    pub fence: i64,
    pub locked_until: i64,
    pub payment_id: Option<String>,
    pub provider_key: Option<String>,
    pub response_status: Option<u16>,
    pub response_body: Option<String>,
    pub response_schema_version: Option<i32>,
    pub error_code: Option<String>,
    pub trace_id: Option<String>,
    pub region: String,
    pub takeovers: i32,
    pub created_at: i64,
    pub updated_at: i64,
    pub expires_at: Option<i64>,
}

impl From<&Record> for RecordView {
    fn from(r: &Record) -> Self {
        Self {
            tenant: r.scope.tenant.to_string(),
            principal: r.scope.principal.to_string(),
            operation: r.scope.operation.to_owned(),
            key: r.scope.key.to_string(),
            status: r.status.to_string(),
            step: r.step.to_string(),
            fence: r.fence,
            locked_until: r.locked_until.0,
            payment_id: r.payment_id.as_ref().map(ToString::to_string),
            provider_key: r.provider_key.clone(),
            response_status: r.response.as_ref().map(|x| x.status),
            response_body: r
                .response
                .as_ref()
                .map(|x| String::from_utf8_lossy(&x.body).into_owned()),
            response_schema_version: r.response.as_ref().map(|x| x.schema_version),
            error_code: r.error_code.clone(),
            trace_id: r.trace_id.clone(),
            region: r.region.clone(),
            takeovers: r.takeovers,
            created_at: r.created_at.0,
            updated_at: r.updated_at.0,
            expires_at: r.expires_at.map(|t| t.0),
        }
    }
}

fn unavailable(e: StoreError) -> ApiError {
    ApiError::Unavailable(e.into())
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    /// `unknown`, `in_progress`, `completed`, … or the stored spelling.
    pub status: String,
    #[serde(default = "default_limit")]
    pub limit: i64,
}

fn default_limit() -> i64 {
    100
}

pub fn parse_status(s: &str) -> Option<Status> {
    let upper = s.to_ascii_uppercase().replace('-', "_");
    match upper.as_str() {
        "UNKNOWN" => Some(Status::UnknownRequiresRecovery),
        other => other.parse().ok(),
    }
}

async fn list(
    State(state): State<AppState>,
    _: Operator,
    Query(q): Query<ListQuery>,
) -> Result<Json<Vec<RecordView>>, ApiError> {
    let status = parse_status(&q.status).ok_or_else(|| {
        ApiError::InvalidCommand(format!("status: unknown status {:?}", q.status))
    })?;
    let records = state
        .store
        .operators
        .list(status, q.limit.clamp(1, 1000))
        .await
        .map_err(unavailable)?;
    Ok(Json(records.iter().map(RecordView::from).collect()))
}

async fn show(
    State(state): State<AppState>,
    _: Operator,
    Path((tenant, key)): Path<(String, String)>,
) -> Result<Json<Vec<RecordView>>, ApiError> {
    let tenant = TenantId::parse(&tenant).ok_or(ApiError::NotFound)?;
    let records = state
        .store
        .operators
        .find(&tenant, &key)
        .await
        .map_err(unavailable)?;
    if records.is_empty() {
        return Err(ApiError::NotFound);
    }
    Ok(Json(records.iter().map(RecordView::from).collect()))
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ResolveRequest {
    /// `charged` or `not-charged`.
    pub outcome: String,
    pub reason: String,
    pub actor: String,
}

async fn resolve(
    State(state): State<AppState>,
    _: Operator,
    Path((tenant, principal, key)): Path<(String, String, String)>,
    Json(req): Json<ResolveRequest>,
) -> Result<Json<RecordView>, ApiError> {
    let outcome = match req.outcome.as_str() {
        "charged" => ResolvedOutcome::Charged,
        "not-charged" => ResolvedOutcome::NotCharged,
        other => {
            return Err(ApiError::InvalidCommand(format!(
                "outcome: expected charged or not-charged, got {other:?}"
            )));
        }
    };
    let verdict = Verdict::new(outcome, req.reason, req.actor).map_err(resolve_error)?;
    let scope = Scope {
        tenant: TenantId::parse(&tenant).ok_or(ApiError::NotFound)?,
        principal: PrincipalId::parse(&principal).ok_or(ApiError::NotFound)?,
        operation: OPERATION,
        key: IdempotencyKey::parse(key.as_bytes()).map_err(|_| ApiError::NotFound)?,
    };
    let after = resolve_unknown(&state, &scope, verdict)
        .await
        .map_err(resolve_error)?;
    Ok(Json(RecordView::from(&after)))
}

#[derive(Debug, Deserialize)]
pub struct TrailQuery {
    #[serde(default = "default_limit")]
    pub limit: i64,
}

async fn resolutions(
    State(state): State<AppState>,
    _: Operator,
    Query(q): Query<TrailQuery>,
) -> Result<Json<Vec<AuditEntry>>, ApiError> {
    let trail = state
        .store
        .operators
        .resolutions(q.limit.clamp(1, 1000))
        .await
        .map_err(unavailable)?;
    Ok(Json(trail))
}

fn resolve_error(e: ResolveError) -> ApiError {
    match e {
        ResolveError::NotFound => ApiError::NotFound,
        ResolveError::Busy { retry_after } => ApiError::InProgress { retry_after },
        ResolveError::Store(e) => unavailable(e),
        e @ (ResolveError::MissingAudit
        | ResolveError::NotAwaiting(_)
        | ResolveError::NoPayment
        | ResolveError::PaymentMissing) => ApiError::InvalidCommand(e.to_string()),
    }
}
