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
//!
//! A node that answers `503` waiting only on raft-store, the store every
//! region shares ([`once_edge::ops::WAITING_ON_HEADER`]), fails its region's
//! round only if another region was ready that round: then the region is
//! cut off from the store and its tenants are better served elsewhere. When
//! no region is ready and some wait on the store, the store is what failed
//! (an election after its leader's region died): the waiting regions pass
//! the round, stay eligible standbys, and the failover of the region that
//! died waits in its write for the new leader instead of for every region to
//! come back and settle
//! (docs/decisions/0056-a-shared-store-outage-is-no-regions-failure.md).

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
    let answers = join_all(regions.iter().map(|r| region_answers(state, r))).await;
    let store_out = !answers.contains(&Answer::Ready) && answers.contains(&Answer::WaitingOnStore);
    let mut went_down = Vec::new();
    for (region, answer) in regions.iter().zip(answers) {
        let ok = match answer {
            Answer::Ready => true,
            Answer::WaitingOnStore => store_out,
            Answer::Failed => false,
        };
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
                    last_round = ?answer,
                    store_out,
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

/// What a region's nodes answered one round's `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Some node is ready.
    Ready,
    /// None is, and some node waits only on the shared store.
    WaitingOnStore,
    /// No node answered in time, or none could serve for a reason of its own.
    Failed,
}

/// The best of what `region`'s nodes answer `/readyz` in time.
async fn region_answers(state: &RouterState, region: &str) -> Answer {
    if !state.partition.reachable(region) {
        return Answer::Failed;
    }
    let timeout = state.config.health.interval;
    let checks = state.config.nodes.urls(region).iter().map(|url| {
        let request = state
            .http
            .get(format!("{url}/readyz"))
            .header(
                once_edge::ops::ANSWER_WITHIN_HEADER,
                timeout.as_millis().to_string(),
            )
            .timeout(timeout)
            .send();
        async move {
            match request.await {
                Ok(r) if r.status().is_success() => Answer::Ready,
                Ok(r) if waits_on_store(&r) => Answer::WaitingOnStore,
                _ => Answer::Failed,
            }
        }
    });
    let answers = join_all(checks).await;
    [Answer::Ready, Answer::WaitingOnStore]
        .into_iter()
        .find(|best| answers.contains(best))
        .unwrap_or(Answer::Failed)
}

fn waits_on_store(response: &reqwest::Response) -> bool {
    response.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE
        && response
            .headers()
            .get(once_edge::ops::WAITING_ON_HEADER)
            .is_some_and(|v| v == once_edge::ops::SHARED_STORE)
}

/// Writes a region's status to the store; failure is logged, not fatal
/// (other routers publish the same verdict, and the status is advisory).
async fn publish(state: &RouterState, region: &str, status: RegionStatus) {
    let write = state.store.directory().set_region_status(region, status);
    match tokio::time::timeout(Duration::from_secs(5), write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::error!(region, ?status, error = %e, "could not publish region status")
        }
        Err(_) => tracing::error!(region, ?status, "publishing region status timed out"),
    }
}
