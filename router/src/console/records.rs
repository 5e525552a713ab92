//! The console's view of idempotency records that need an operator, read
//! from every region's node admin listener (`--node-admins`), and the
//! resolve action sent back to one of them, with the admin token.
//!
//! Stuck means `UNKNOWN_REQUIRES_RECOVERY` (the provider's outcome is not
//! known; the recovery worker keeps asking) or `IN_PROGRESS` past its lease
//! (its owner is gone and no node has taken it over yet). In raft mode every
//! node reads the same store, so the same record comes from several regions:
//! it is listed once. Stored response bodies are never read here.

use std::time::Duration;

use futures::future::join_all;
use serde::{Deserialize, Serialize};

use crate::failover::now_ms;
use crate::nodes::NodeDirectory;
use crate::state::RouterState;

/// How long one node admin read may take before the console shows it as
/// unreachable.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// At most this many records per status and region.
const LIMIT: u32 = 100;

/// A record as the node's `/admin/records` lists it (the fields the
/// console shows).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StuckRecord {
    pub tenant: String,
    pub principal: String,
    pub key: String,
    pub status: String,
    pub step: String,
    pub locked_until: i64,
    pub payment_id: Option<String>,
    pub error_code: Option<String>,
    pub trace_id: Option<String>,
    /// The region that created it.
    pub region: String,
    pub takeovers: i32,
    pub created_at: i64,
    pub updated_at: i64,
    /// Where a resolve action goes: the region that created it if it has a
    /// node admin listener, else the region whose node listed it.
    #[serde(default)]
    pub via: String,
}

/// An audit entry as the node's `/admin/resolutions` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolution {
    pub tenant: String,
    pub principal: String,
    pub key: String,
    pub payment_id: Option<String>,
    pub outcome: String,
    pub reason: String,
    pub actor: String,
    pub resolved_at: i64,
    /// The region whose database keeps the entry.
    #[serde(default)]
    pub region: String,
}

/// Everything read from the node admin listeners, with what could not be.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorView {
    pub stuck: Vec<StuckRecord>,
    pub resolutions: Vec<Resolution>,
    /// `region: error` for each listener that did not answer.
    pub unreachable: Vec<String>,
}

/// The resolve action as the console sends it.
#[derive(Debug, Deserialize)]
pub struct ResolveAction {
    pub region: String,
    pub tenant: String,
    pub principal: String,
    pub key: String,
    /// `charged` or `not-charged`.
    pub outcome: String,
    pub reason: String,
    pub actor: String,
}

/// A node admin listener's answer to a resolve action, passed through.
#[derive(Debug)]
pub struct NodeAnswer {
    pub status: u16,
    pub body: bytes::Bytes,
}

fn endpoint(base: &str, segments: &[&str]) -> anyhow::Result<reqwest::Url> {
    let mut url = reqwest::Url::parse(base)?;
    url.path_segments_mut()
        .map_err(|()| anyhow::anyhow!("{base} cannot take a path"))?
        .pop_if_empty()
        .extend(segments);
    Ok(url)
}

/// The admin token the node admin listeners take: the nodes' own when the
/// router was given it, else the router's.
fn admin_bearer(state: &RouterState) -> &str {
    let config = &state.config;
    config
        .node_admin_token
        .as_ref()
        .or(config.admin_token.as_ref())
        .map_or("", |t| t.expose())
}

async fn get_json<T: serde::de::DeserializeOwned>(
    state: &RouterState,
    url: reqwest::Url,
) -> anyhow::Result<T> {
    let response = state
        .control_http
        .get(url)
        .bearer_auth(admin_bearer(state))
        .timeout(READ_TIMEOUT)
        .send()
        .await?
        .error_for_status()?;
    Ok(response.json().await?)
}

async fn read_region(
    state: &RouterState,
    region: &str,
    base: &str,
) -> anyhow::Result<(Vec<StuckRecord>, Vec<Resolution>)> {
    let listed = |status: &'static str| {
        let mut url = endpoint(base, &["admin", "records"]);
        if let Ok(url) = &mut url {
            url.query_pairs_mut()
                .append_pair("status", status)
                .append_pair("limit", &LIMIT.to_string());
        }
        async move { get_json::<Vec<StuckRecord>>(state, url?).await }
    };
    let mut trail_url = endpoint(base, &["admin", "resolutions"])?;
    trail_url.query_pairs_mut().append_pair("limit", "20");
    let (unknown, in_progress, trail) = tokio::join!(
        listed("unknown"),
        listed("in_progress"),
        get_json::<Vec<Resolution>>(state, trail_url)
    );
    let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);
    let mut stuck: Vec<StuckRecord> = unknown?
        .into_iter()
        .chain(in_progress?.into_iter().filter(|r| r.locked_until < now))
        .collect();
    for record in &mut stuck {
        record.via = region.to_owned();
    }
    let mut trail = trail?;
    for entry in &mut trail {
        entry.region = region.to_owned();
    }
    Ok((stuck, trail))
}

/// Reads every region's stuck records and audit trail at once.
pub async fn operator_view(state: &RouterState, admins: &NodeDirectory) -> OperatorView {
    let reads = admins.regions().filter_map(|region| {
        let base = admins.urls(region).first()?;
        Some(async move { (region, read_region(state, region, base).await) })
    });
    let mut view = OperatorView::default();
    for (region, read) in join_all(reads).await {
        match read {
            Ok((stuck, trail)) => {
                for record in stuck {
                    let seen = view.stuck.iter().any(|r| {
                        (&r.tenant, &r.principal, &r.key)
                            == (&record.tenant, &record.principal, &record.key)
                    });
                    if !seen {
                        view.stuck.push(record);
                    }
                }
                view.resolutions.extend(trail);
            }
            Err(e) => view.unreachable.push(format!("{region}: {e:#}")),
        }
    }
    // A resolve goes to the region that created the record, where its
    // payment row is, when that region has a listener.
    for record in &mut view.stuck {
        if admins.contains(&record.region) {
            record.via.clone_from(&record.region);
        }
    }
    view.stuck.sort_by_key(|r| r.created_at);
    view.resolutions
        .sort_by_key(|a| std::cmp::Reverse(a.resolved_at));
    view
}

/// Sends `action` to a node admin listener of its region.
pub async fn resolve(
    state: &RouterState,
    admins: &NodeDirectory,
    action: &ResolveAction,
) -> anyhow::Result<NodeAnswer> {
    let base = admins
        .urls(&action.region)
        .first()
        .ok_or_else(|| anyhow::anyhow!("no node admin listener for {:?}", action.region))?;
    let url = endpoint(
        base,
        &[
            "admin",
            "records",
            &action.tenant,
            &action.principal,
            &action.key,
            "resolve",
        ],
    )?;
    let response = state
        .control_http
        .post(url)
        .bearer_auth(admin_bearer(state))
        .timeout(Duration::from_secs(10))
        .json(&serde_json::json!({
            "outcome": action.outcome,
            "reason": action.reason,
            "actor": action.actor,
        }))
        .send()
        .await?;
    Ok(NodeAnswer {
        status: response.status().as_u16(),
        body: response.bytes().await?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_escaped_not_interpreted() {
        let url = endpoint(
            "http://127.0.0.1:9090/",
            &["admin", "records", "acme", "a/b", "k?1", "resolve"],
        )
        .unwrap();
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:9090/admin/records/acme/a%2Fb/k%3F1/resolve"
        );
    }
}
