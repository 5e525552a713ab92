//! `GET /payments`: the lookups a reconciler needs when it lost an answer
//! and has no key at hand — a tenant's payments by exact `merchantReference`
//! or `accountId`, in creation order, a keyset page at a time.
//!
//! The handler owns the request's edges (tenant from the API key, query
//! parsing, the page's bytes); the query, cursor and rendering are
//! [`crate::payments::listing`], the reads behind them
//! [`crate::store::PaymentReads::list`] in each store mode:
//!
//! - `sql`: a keyset query on the regional database's `payments`.
//! - `raft`: from raft-store's records (a per-tenant index in creation
//!   order), each payment rendered from its record, so every region
//!   answers the same list byte for byte, before and after a failover. A
//!   record purged past its metadata retention takes its payment out of
//!   the listing (then only `GET /payments/{id}` in a region that holds the
//!   row knows it), as does a key renewed past its replay window for the
//!   payment it created before; see `RaftStore`'s `list`.

use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use tracing::instrument;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::payments::listing::{ListPayments, render_page};
use crate::state::AppState;

/// List the caller's payments in creation order, optionally by exact
/// `accountId` and/or `merchantReference`.
#[utoipa::path(
    get,
    path = "/payments",
    tag = "payments",
    params(
        ("accountId" = Option<String>, Query, description = "Only this account's payments (exact; `[A-Za-z0-9_-]{1,64}`)"),
        ("merchantReference" = Option<String>, Query, description = "Only payments with this merchant reference (exact; 1-128 printable ASCII)"),
        ("limit" = Option<u32>, Query, description = "Payments per page, 1-100; default 20"),
        ("cursor" = Option<String>, Query, description = "`nextCursor` of the previous page; opaque"),
    ),
    responses(
        (status = 200, description = "A page of payments, oldest first; `nextCursor` is null on the last page", body = crate::payments::listing::PaymentListV2),
        (status = 401, description = "UNAUTHORIZED", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: unknown or repeated parameter, limit outside 1-100, invalid accountId or merchantReference, malformed cursor; the message names the parameter", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: retry", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
#[instrument(name = "list payments", skip_all)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let query = ListPayments::parse(query.as_deref())?;
    let page = state
        .store
        .payments
        .list(
            &caller.tenant,
            &query.filter,
            query.after.as_ref(),
            query.limit,
        )
        .await
        .map_err(|e| ApiError::Unavailable(e.into()))?;
    let body = render_page(
        &page.payments,
        page.next.as_ref(),
        state.config.response_schema,
    );
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}
