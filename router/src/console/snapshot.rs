//! One read of everything the console shows, gathered at once, each part
//! with a short timeout: a dead region or a store without a leader makes
//! its part say so, never the whole page hang.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use once_store_client::command::RegionStatus;
use once_store_client::protocol::Status;
use serde::Serialize;

use super::drills::{self, DrillReport};
use super::phase::{Evidence, Phase};
use super::records::{self, OperatorView};
use crate::audit::FailbackEntry;
use crate::failover::now_ms;
use crate::state::RouterState;

/// The longest any store read may take.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegionView {
    pub name: String,
    pub phase: Phase,
    pub up: bool,
    pub consecutive_failures: u32,
    pub consecutive_successes: u32,
    /// What routers published in raft-store.
    pub published: Option<RegionStatus>,
    /// Cut off from this router by a drill's simulated partition.
    pub cut: bool,
    pub nodes: Vec<String>,
    /// Tenants served here now.
    pub tenants_here: usize,
    pub own_tenants: usize,
    pub own_tenants_away: usize,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberView {
    pub endpoint: String,
    /// `None` when the member did not answer (`error` says why).
    pub status: Option<Status>,
    /// Entries committed but not applied yet on this member.
    pub apply_lag: Option<u64>,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantView {
    pub tenant: String,
    pub home: String,
    pub preferred_home: String,
    pub standbys: Vec<String>,
    pub epoch: u64,
}

/// What `/console/api/state` answers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsoleState {
    pub router_region: String,
    pub generated_at_ms: u64,
    pub auto_failover: bool,
    pub regions: Vec<RegionView>,
    /// Why the store's region statuses could not be read, if so.
    pub store_error: Option<String>,
    pub members: Vec<MemberView>,
    pub tenants: Vec<TenantView>,
    /// `None` without `--node-admins`.
    pub operators: Option<OperatorView>,
    /// `None` without `--drill-reports`.
    pub drills: Option<Vec<DrillReport>>,
    /// Failbacks asked for from this router's console, newest first.
    pub failbacks: Vec<FailbackEntry>,
}

async fn members(state: &RouterState) -> Vec<MemberView> {
    let reads = state
        .config
        .store_endpoints
        .iter()
        .enumerate()
        .map(|(i, endpoint)| async move {
            let (status, error) = match store_read(state.store.directory().status_of(i)).await {
                Ok(status) => (Some(status), None),
                Err(e) => (None, Some(e)),
            };
            MemberView {
                endpoint: endpoint.clone(),
                apply_lag: status.as_ref().and_then(|s| {
                    Some(
                        s.committed_index?
                            .saturating_sub(s.applied_index.unwrap_or(0)),
                    )
                }),
                status,
                error,
            }
        });
    join_all(reads).await
}

/// A store read bounded by [`STORE_TIMEOUT`]; the error as the page shows it.
async fn store_read<T, E: std::fmt::Display>(
    read: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(STORE_TIMEOUT, read).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {STORE_TIMEOUT:?}")),
    }
}

async fn published(state: &RouterState) -> (BTreeMap<String, RegionStatus>, Option<String>) {
    match store_read(state.store.directory().regions()).await {
        Ok(regions) => (regions.into_iter().collect(), None),
        Err(e) => (BTreeMap::new(), Some(e)),
    }
}

fn regions(
    state: &RouterState,
    published: &BTreeMap<String, RegionStatus>,
    tenants: &[TenantView],
) -> Vec<RegionView> {
    let cut = state.partition.state(state.config.nodes.regions());
    state
        .health
        .checks()
        .into_iter()
        .map(|check| {
            let own: Vec<&TenantView> = tenants
                .iter()
                .filter(|t| t.preferred_home == check.region)
                .collect();
            let own_tenants_away = own.iter().filter(|t| t.home != check.region).count();
            let evidence = Evidence {
                up: check.up,
                consecutive_failures: check.consecutive_failures,
                consecutive_successes: check.consecutive_successes,
                published: published.get(&check.region).copied(),
                own_tenants: own.len(),
                own_tenants_away,
            };
            RegionView {
                phase: Phase::of(evidence),
                up: check.up,
                consecutive_failures: check.consecutive_failures,
                consecutive_successes: check.consecutive_successes,
                published: evidence.published,
                cut: cut.cut_regions.contains(&check.region),
                nodes: state.config.nodes.urls(&check.region).to_vec(),
                tenants_here: tenants.iter().filter(|t| t.home == check.region).count(),
                own_tenants: own.len(),
                own_tenants_away,
                name: check.region,
            }
        })
        .collect()
}

/// Reads everything the console shows.
pub async fn gather(state: &RouterState) -> ConsoleState {
    let tenants: Vec<TenantView> = state
        .placements
        .all()
        .into_iter()
        .map(|(tenant, p)| TenantView {
            tenant,
            home: p.home,
            preferred_home: p.preferred_home,
            standbys: p.standbys,
            epoch: p.epoch,
        })
        .collect();
    let operators = async {
        match &state.config.node_admins {
            Some(admins) => Some(records::operator_view(state, admins).await),
            None => None,
        }
    };
    let ((published, store_error), members, operators) =
        tokio::join!(published(state), members(state), operators);
    let drills = match state.config.drill_reports.clone() {
        Some(dir) => Some(
            tokio::task::spawn_blocking(move || drills::recent(&dir))
                .await
                .unwrap_or_default(),
        ),
        None => None,
    };
    ConsoleState {
        router_region: state.config.region.clone(),
        generated_at_ms: now_ms(),
        auto_failover: state.config.auto_failover,
        regions: regions(state, &published, &tenants),
        store_error,
        members,
        tenants,
        operators,
        drills,
        failbacks: state.failbacks.entries(),
    }
}
