//! Operator endpoints, on the admin listener behind the admin token
//! (`ONCE_ADMIN_TOKEN`); without one they do not exist (404, like any
//! unknown route).
//!
//! - `POST /admin/failover {"region":"eu-west"}`: what the health checker
//!   does when a region goes down, on command (drills).
//! - `POST /admin/failback {"region":"eu-west"}`: every tenant whose
//!   preferred home is that region, and which lives elsewhere, goes home.
//!   Refused with `409 REGION_NOT_HEALTHY` while this router's own health
//!   checks still count the region down: its next round would move the
//!   tenants away again.
//! - `GET /admin/placements`: the cached table and this router's view of
//!   each region.
//! - `GET|POST /admin/partition {"cut_regions":["eu-west"]}`: the regions a
//!   drill has cut off from this router ([`crate::partition`]); `[]` heals.
//!
//! Both moves answer the tenants moved, with their new epochs, and those
//! left where they were, with the reason.

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::routing::{get, post};
use axum::{Json, Router};
use once_edge::ApiError;
use once_store_client::command::RegionStatus;
use serde::Deserialize;

use crate::failover::{MoveReport, Trigger};
use crate::partition::{CutState, SetCut};
use crate::state::SharedState;

pub fn router() -> Router<SharedState> {
    Router::new()
        .route("/admin/failover", post(failover))
        .route("/admin/failback", post(failback))
        .route("/admin/placements", get(placements))
        .route("/admin/partition", get(partition).post(set_partition))
}

/// Proof that the caller presented the admin token.
#[derive(Debug)]
pub struct Operator;

impl FromRequestParts<SharedState> for Operator {
    type Rejection = once_edge::admin::AdminRefusal;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &SharedState,
    ) -> Result<Self, Self::Rejection> {
        once_edge::admin::check_operator(
            state.config.admin_token.as_ref(),
            &parts.headers,
            &parts.extensions,
        )?;
        Ok(Operator)
    }
}

#[derive(Debug, Deserialize)]
pub struct RegionRequest {
    pub region: String,
}

fn known_region(state: &SharedState, region: &str) -> Result<(), ApiError> {
    if state.config.nodes.contains(region) {
        Ok(())
    } else {
        Err(ApiError::InvalidCommand(format!(
            "unknown region {region:?}: not in --nodes"
        )))
    }
}

#[tracing::instrument(name = "operator fails a region over", skip_all, fields(region = %body.region))]
async fn failover(
    _: Operator,
    State(state): State<SharedState>,
    Json(body): Json<RegionRequest>,
) -> Result<Json<MoveReport>, ApiError> {
    known_region(&state, &body.region)?;
    tracing::warn!(region = %body.region, "operator failover requested");
    state
        .store
        .directory()
        .set_region_status(&body.region, RegionStatus::Down)
        .await
        .map_err(|e| ApiError::Unavailable(e.into()))?;
    let report = state
        .mover()
        .fail_over(&body.region, Trigger::Command)
        .await
        .map_err(|e| ApiError::Unavailable(e.into()))?;
    Ok(Json(report))
}

#[tracing::instrument(name = "operator fails tenants back", skip_all, fields(region = %body.region))]
async fn failback(
    _: Operator,
    State(state): State<SharedState>,
    Json(body): Json<RegionRequest>,
) -> Result<Json<MoveReport>, ApiError> {
    Ok(Json(fail_back(&state, &body.region).await?))
}

/// Every tenant whose preferred home is `region` goes home, unless this
/// router still counts the region down (`409 REGION_NOT_HEALTHY`). The one
/// failback of `/admin/failback` and the console's.
pub(crate) async fn fail_back(state: &SharedState, region: &str) -> Result<MoveReport, ApiError> {
    known_region(state, region)?;
    if !state.health.is_up(region) {
        return Err(ApiError::RegionNotHealthy {
            region: region.to_owned(),
        });
    }
    tracing::warn!(%region, "operator failback requested");
    state
        .store
        .directory()
        .set_region_status(region, RegionStatus::Healthy)
        .await
        .map_err(|e| ApiError::Unavailable(e.into()))?;
    state
        .mover()
        .fail_back(region)
        .await
        .map_err(|e| ApiError::Unavailable(e.into()))
}

async fn placements(_: Operator, State(state): State<SharedState>) -> Json<serde_json::Value> {
    let placements: serde_json::Map<String, serde_json::Value> = state
        .placements
        .all()
        .into_iter()
        .map(|(tenant, p)| {
            (
                tenant,
                serde_json::json!({
                    "home": p.home,
                    "standbys": p.standbys,
                    "epoch": p.epoch,
                    "preferredHome": p.preferred_home,
                }),
            )
        })
        .collect();
    let regions: Vec<_> = state
        .health
        .snapshot()
        .into_iter()
        .map(|(region, up, failures)| {
            serde_json::json!({ "region": region, "up": up, "consecutiveFailures": failures })
        })
        .collect();
    Json(serde_json::json!({
        "region": state.config.region,
        "loaded": state.placements.is_loaded(),
        "placements": placements,
        "regions": regions,
    }))
}

async fn partition(_: Operator, State(state): State<SharedState>) -> Json<CutState> {
    Json(state.partition.state(state.config.nodes.regions()))
}

#[tracing::instrument(name = "operator changes the simulated partition", skip_all, fields(cut = ?body.cut_regions))]
async fn set_partition(
    _: Operator,
    State(state): State<SharedState>,
    Json(body): Json<SetCut>,
) -> Result<Json<CutState>, ApiError> {
    for region in &body.cut_regions {
        known_region(&state, region.trim())?;
    }
    state.partition.set(body.cut_regions);
    let now = state.partition.state(state.config.nodes.regions());
    tracing::warn!(
        cut_regions = ?now.cut_regions,
        unreachable_regions = ?now.unreachable_regions,
        "simulated partition changed"
    );
    Ok(Json(now))
}
