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
use crate::error::ApiError;
use crate::payments::listing::{ListPayments, render_page};
use crate::state::AppState;

/// List the caller's payments in creation order, optionally by exact
/// `accountId` and/or `merchantReference`.
#[utoipa::path(
    get,
    path = "/payments",
    operation_id = "listPayments",
    tag = "payments",
    params(crate::payments::listing::ListParams),
    responses(crate::payments::answers::ListAnswers),
    security(("bearer" = []))
)]
#[instrument(name = "list payments", skip_all)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let query = ListPayments::parse(query.as_deref())?;
    let mut page = state
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
    // Answered here and still being finished: as the client was told
    // (`crate::finishing`).
    for payment in &mut page.payments {
        if let Some(answered) = state.finishing.payment(&caller.tenant, &payment.id) {
            *payment = answered;
        }
    }
    let body = render_page(
        &page.payments,
        page.next.as_ref(),
        state.config.response_schema,
    );
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}
