//! Region health checks and automatic failover.
//!
//! Every `--health-check-interval` the router asks every node of every
//! region for `/readyz` (timeout = the interval). A round fails for a region
//! when *every* node of it fails; after `--health-check-failures` failed
//! rounds in a row the region is down: with `--auto-failover` the router
//! moves every tenant homed there to its first healthy standby in one store
//! write ([`crate::failover`]), then writes `Down` to the store. While a
//! region stays down, tenants that still (or again) name it home are moved
//! on later rounds too, so a failed store write is retried. After
//! `--health-check-successes` good rounds it is `Healthy` again in the
//! store; tenants are *not* moved back (that is `POST /admin/failback`).
//!
//! A region cut off from this router by `/admin/partition`
//! ([`crate::partition`]) fails its checks without a request being sent.

use std::time::Duration;

use futures::future::join_all;
use once_store_client::command::RegionStatus;
use tokio::time::MissedTickBehavior;

use crate::failover::{Trigger, now_ms};
use crate::metrics::Metrics;
use crate::regions::Verdict;
use crate::state::{RouterState, SharedState};

/// Checks regions until the task is aborted.
pub async fn watch_regions(state: SharedState) {
    let mut ticker = tokio::time::interval(state.config.health.interval);
    // A slow failover delays the next round rather than bunching rounds up.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        check_once(&state).await;
    }
}

/// One round: check every region, act on what changed.
pub async fn check_once(state: &RouterState) {
    let regions: Vec<String> = state.config.nodes.regions().map(str::to_owned).collect();
    let results = join_all(regions.iter().map(|r| region_answers(state, r))).await;
    let mut went_down = Vec::new();
    for (region, ok) in regions.iter().zip(results) {
        let (verdict, failures) = state.health.record(region, ok);
        let labels = Metrics::region(region);
        state
            .metrics
            .region_failures
            .get_or_create(&labels)
            .set(i64::from(failures));
        state
            .metrics
            .region_healthy
            .get_or_create(&labels)
            .set(i64::from(state.health.is_up(region)));
        match verdict {
            Verdict::Unchanged => {}
            Verdict::WentDown => {
                tracing::warn!(
                    region,
                    failures,
                    at_ms = now_ms(),
                    "region down: every node failed its health checks"
                );
                state.metrics.region_failovers.get_or_create(&labels).inc();
                // Published after the tenants moved: the status is
                // advisory, the move is what clients wait for.
                went_down.push(region.clone());
            }
            Verdict::CameBack => {
                tracing::warn!(
                    region,
                    at_ms = now_ms(),
                    "region healthy again; tenants stay where they are until a failback"
                );
                publish(state, region, RegionStatus::Healthy).await;
            }
        }
    }
    if !state.config.auto_failover {
        for region in &went_down {
            tracing::warn!(
                region,
                "automatic failover disabled (--auto-failover=false): tenants stay"
            );
            publish(state, region, RegionStatus::Down).await;
        }
        return;
    }
    for region in state.health.down_regions() {
        // Just went down: always ask the store. Down for a while: only if
        // the cache still shows tenants there (a failed move, or a
        // placement written since).
        if !went_down.contains(&region) && state.placements.homed_in(&region).is_empty() {
            continue;
        }
        match state.mover().fail_over(&region, Trigger::Automatic).await {
            Ok(report) => tracing::warn!(
                region,
                moved = report.moved.len(),
                skipped = report.skipped.len(),
                at_ms = now_ms(),
                "automatic failover round done"
            ),
            Err(e) => {
                tracing::error!(region, error = %e, "automatic failover failed; retrying next round")
            }
        }
    }
    for region in &went_down {
        publish(state, region, RegionStatus::Down).await;
    }
}

/// Whether any node of `region` answers `/readyz` with a success in time.
async fn region_answers(state: &RouterState, region: &str) -> bool {
    if !state.partition.reachable(region) {
        return false;
    }
    let timeout = state.config.health.interval;
    let checks = state.config.nodes.urls(region).iter().map(|url| {
        let request = state
            .http
            .get(format!("{url}/readyz"))
            .timeout(timeout)
            .send();
        async move {
            match request.await {
                Ok(r) => r.status().is_success(),
                Err(_) => false,
            }
        }
    });
    join_all(checks).await.into_iter().any(|ok| ok)
}

/// Writes a region's status to the store; failure is logged, not fatal
/// (other routers publish the same verdict, and the status is advisory).
async fn publish(state: &RouterState, region: &str, status: RegionStatus) {
    let write = state.store.set_region_status(region, status);
    match tokio::time::timeout(Duration::from_secs(5), write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::error!(region, ?status, error = %e, "could not publish region status")
        }
        Err(_) => tracing::error!(region, ?status, "publishing region status timed out"),
    }
}
