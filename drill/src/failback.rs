//! Failback: ask the router to move the region's tenants home again
//! (`POST {router}/admin/failback {"region": R}` with the admin token), then
//! probe with fresh payments until every one of them is answered by a node
//! of R (`X-Once-Region`). Probes are ordinary logged operations, so the
//! checker covers them too.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::client_log::{EpochMillis, now_ms};
use crate::cluster::Tenant;
use crate::load::{OperationFactory, PaymentClient};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailbackResult {
    pub requested_at: EpochMillis,
    /// The router's answer to the request, e.g. `200` or `404`.
    pub router_status: Option<u16>,
    pub router_body: Option<String>,
    /// When every tenant of the region was answered by the region again.
    pub home_again_at: Option<EpochMillis>,
    /// Tenants still answered elsewhere (or not at all) when it gave up.
    pub not_home: Vec<String>,
}

/// Waits until raft-store shows `region` healthy again (the routers write
/// that after their success threshold). A failback before that would race
/// the routers' own health state: a router that still counts the region as
/// down moves its tenants away again.
pub async fn wait_until_healthy(
    store_endpoints: &[String],
    tls: Option<once_tls::Tls>,
    region: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let store = once_store_client::client::StoreClient::new(
        store_endpoints,
        once_store_client::client::ClientOptions {
            tls,
            ..Default::default()
        },
    )?;
    let deadline = Instant::now() + timeout;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        let healthy = store.regions().await.is_ok_and(|regions| {
            regions.iter().any(|(name, status)| {
                name == region && *status == once_store_client::command::RegionStatus::Healthy
            })
        });
        if healthy {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "region {region} not healthy within {timeout:?}"
        );
    }
}

/// Requests failback of `region` and waits until its `tenants` are served
/// there again, or `timeout`.
pub async fn fail_back(
    router_url: &str,
    admin_token: &str,
    region: &str,
    tenants: &[Tenant],
    client: &PaymentClient,
    factory: &Arc<OperationFactory>,
    timeout: Duration,
) -> FailbackResult {
    let requested_at = now_ms();
    let deadline = Instant::now() + timeout;
    let (router_status, router_body) =
        request_failback(router_url, admin_token, region, deadline).await;
    let mut result = FailbackResult {
        requested_at,
        router_status,
        router_body,
        home_again_at: None,
        not_home: tenants.iter().map(|t| t.id.clone()).collect(),
    };
    if router_status.is_none_or(|s| !(200..300).contains(&s)) {
        return result;
    }
    // Probing pace: one round of fresh payments per interval.
    let mut probes = tokio::time::interval(Duration::from_millis(250));
    while Instant::now() < deadline {
        probes.tick().await;
        let mut still_away = Vec::new();
        for tenant in tenants.iter().filter(|t| result.not_home.contains(&t.id)) {
            let op = factory.payment(&tenant.id);
            let answer = client.send(&op, &tenant.api_key, deadline).await;
            let home =
                answer.is_some_and(|a| a.is_success() && a.region.as_deref() == Some(region));
            if !home {
                still_away.push(tenant.id.clone());
            }
        }
        result.not_home = still_away;
        if result.not_home.is_empty() {
            result.home_again_at = Some(now_ms());
            break;
        }
    }
    result
}

/// `POST {router}/admin/failback`, again every 250 ms while the router
/// answers `409 REGION_NOT_HEALTHY` (its own health checks have not counted
/// the region up yet) and `deadline` has not passed. Answers the last
/// status and body, or no status and the transport error.
pub(crate) async fn request_failback(
    router_url: &str,
    admin_token: &str,
    region: &str,
    deadline: Instant,
) -> (Option<u16>, Option<String>) {
    let http = reqwest::Client::new();
    let url = format!("{}/admin/failback", router_url.trim_end_matches('/'));
    let mut pace = tokio::time::interval(Duration::from_millis(250));
    loop {
        pace.tick().await;
        let answer = http
            .post(&url)
            .bearer_auth(admin_token)
            .json(&serde_json::json!({ "region": region }))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        let (status, body) = match answer {
            Ok(r) => (Some(r.status().as_u16()), r.text().await.ok()),
            Err(e) => return (None, Some(e.to_string())),
        };
        let not_healthy_yet = status == Some(409)
            && body
                .as_deref()
                .is_some_and(|b| b.contains("REGION_NOT_HEALTHY"));
        if !not_healthy_yet || Instant::now() >= deadline {
            return (status, body);
        }
    }
}
