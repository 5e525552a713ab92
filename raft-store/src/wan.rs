//! A simulated WAN inside the project's own transports, so latency and
//! partition drills run on one machine without `tc netem` or a firewall.
//!
//! Every member has a region label. Between members of *different* regions:
//!
//! - **latency**: each Raft RPC waits `latency` before it is sent (one WAN
//!   round trip per RPC; the answer itself comes back at once);
//! - **partition**: while a member is *isolated* it sends no Raft RPC to
//!   another region and refuses every one from another region, and its
//!   client API refuses clients that declare another region. Processes keep
//!   running; only the links between regions are cut.
//!
//! ```text
//!   member 1 (eu-west) ── Raft RPC + X-Once-Region: eu-west ──► member 2 (us-east)
//!        │ sleep(latency) before sending             │ isolated and eu-west ≠ us-east?
//!        │ isolated? → Unreachable, nothing sent     └─► 503 + X-Once-Partitioned
//!        ▼                                               (the sender maps it to Unreachable)
//! ```
//!
//! The decisions ([`SimulatedWan::delay_to`], [`SimulatedWan::may_send_to`],
//! [`SimulatedWan::accepts`]) are pure functions of the configuration and
//! the isolation flag; the transports ([`crate::network`],
//! [`crate::raft_service`], [`crate::api_service`]) only act on them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::types::NodeId;

/// The sender's region, on every Raft RPC (and bootstrap's probe).
pub const REGION_HEADER: &str = "x-once-region";
/// The caller's region, on client API requests of a `StoreClient` that
/// declares one. Requests without it are always served.
pub const CLIENT_REGION_HEADER: &str = "x-once-client-region";
/// On a refusal caused by a partition: the sender treats it as unreachable
/// (nothing was delivered), not as a failure of a delivered request.
pub const PARTITIONED_HEADER: &str = "x-once-partitioned";
/// `GET` the partition state, `POST` `{"isolated": bool}` to change it.
pub const PARTITION_PATH: &str = "/admin/partition";

/// Where a member is and how far the others are (its part of
/// [`crate::config::StoreConfig`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WanConfig {
    /// This member's region label.
    pub region: String,
    /// Known regions of peers; a peer not listed is in a region of its own
    /// (so by default every peer is remote).
    pub peer_regions: BTreeMap<NodeId, String>,
    /// Added before every Raft RPC to a member of another region.
    pub latency: Duration,
}

impl WanConfig {
    /// Member `id` alone in region `member-<id>`, no latency: every peer is
    /// another region, which matters only once latency or a partition is
    /// switched on.
    pub fn alone(id: NodeId) -> Self {
        Self {
            region: format!("member-{id}"),
            peer_regions: BTreeMap::new(),
            latency: Duration::ZERO,
        }
    }
}

/// The partition state as `/admin/partition` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    pub isolated: bool,
    #[serde(default)]
    pub region: String,
}

/// The request body of `POST /admin/partition`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetPartition {
    pub isolated: bool,
}

/// One member's view of the simulated WAN, shared by its Raft sender, its
/// Raft listener and its client API.
#[derive(Debug)]
pub struct SimulatedWan {
    config: WanConfig,
    /// Read on every RPC and flipped by an operator; an atomic, since no
    /// other state has to change with it.
    isolated: AtomicBool,
}

impl SimulatedWan {
    pub fn new(config: WanConfig) -> Self {
        Self {
            config,
            isolated: AtomicBool::new(false),
        }
    }

    pub fn region(&self) -> &str {
        &self.config.region
    }

    /// Whether `peer` is in another region than this member.
    pub fn is_remote(&self, peer: NodeId) -> bool {
        self.config
            .peer_regions
            .get(&peer)
            .is_none_or(|r| *r != self.config.region)
    }

    /// How long an RPC to `peer` waits before it is sent.
    pub fn delay_to(&self, peer: NodeId) -> Duration {
        if self.is_remote(peer) {
            self.config.latency
        } else {
            Duration::ZERO
        }
    }

    /// Whether an RPC to `peer` may be sent now.
    pub fn may_send_to(&self, peer: NodeId) -> bool {
        !(self.is_isolated() && self.is_remote(peer))
    }

    /// Whether a request from `region` is accepted now. `None` is a sender
    /// that does not say: for Raft RPC every member says, so it counts as
    /// another region; for the client API it is served (see
    /// [`Self::accepts_client`]).
    pub fn accepts(&self, region: Option<&str>) -> bool {
        !self.is_isolated() || region == Some(self.config.region.as_str())
    }

    /// Whether a client API request declaring `region` (or none) is served.
    pub fn accepts_client(&self, region: Option<&str>) -> bool {
        region.is_none() || self.accepts(region)
    }

    pub fn is_isolated(&self) -> bool {
        self.isolated.load(Ordering::Relaxed)
    }

    pub fn set_isolated(&self, isolated: bool) {
        self.isolated.store(isolated, Ordering::Relaxed);
    }

    pub fn state(&self) -> PartitionState {
        PartitionState {
            isolated: self.is_isolated(),
            region: self.config.region.clone(),
        }
    }

    /// The answer to a request refused by the partition.
    pub fn refusal(&self, from: Option<&str>) -> Response {
        let mut response = (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "partitioned: region {} is cut off from region {}",
                self.config.region,
                from.unwrap_or("(undeclared)")
            ),
        )
            .into_response();
        response
            .headers_mut()
            .insert(PARTITIONED_HEADER, HeaderValue::from_static("true"));
        response
    }
}

/// Parses `--peer-regions 1=eu-west,2=us-east` (one `ID=REGION` per item).
pub fn parse_peer_regions(items: &[String]) -> Result<BTreeMap<NodeId, String>, String> {
    let mut regions = BTreeMap::new();
    for item in items {
        let (id, region) = item
            .split_once('=')
            .ok_or_else(|| format!("peer region {item:?} is not ID=REGION"))?;
        let id: NodeId = id
            .trim()
            .parse()
            .map_err(|e| format!("peer id {id:?}: {e}"))?;
        let region = region.trim();
        if region.is_empty() {
            return Err(format!("peer {id} has an empty region"));
        }
        if regions.insert(id, region.to_owned()).is_some() {
            return Err(format!("peer {id} is listed twice"));
        }
    }
    Ok(regions)
}

/// This member's region: `--region` if given, else its own entry in the
/// peer regions, else `member-<id>`; the two must agree when both are given.
pub fn own_region(
    id: NodeId,
    flag: Option<&str>,
    peer_regions: &BTreeMap<NodeId, String>,
) -> Result<String, String> {
    match (flag, peer_regions.get(&id)) {
        (Some(flag), Some(listed)) if flag != listed => Err(format!(
            "--region {flag} but --peer-regions puts member {id} in {listed}"
        )),
        (Some(flag), _) => Ok(flag.to_owned()),
        (None, Some(listed)) => Ok(listed.clone()),
        (None, None) => Ok(format!("member-{id}")),
    }
}

/// The value of `name` in `headers`, if it is text.
pub fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether an answer is a partition refusal (see [`PARTITIONED_HEADER`]).
pub fn is_partition_refusal(status: u16, headers: &reqwest::header::HeaderMap) -> bool {
    status == StatusCode::SERVICE_UNAVAILABLE.as_u16() && headers.contains_key(PARTITIONED_HEADER)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eu_with_peers(latency_ms: u64) -> SimulatedWan {
        SimulatedWan::new(WanConfig {
            region: "eu-west".into(),
            peer_regions: BTreeMap::from([
                (1, "eu-west".into()),
                (2, "eu-west".into()),
                (3, "us-east".into()),
            ]),
            latency: Duration::from_millis(latency_ms),
        })
    }

    #[test]
    fn only_rpcs_to_another_region_wait_for_the_latency() {
        let wan = eu_with_peers(70);
        assert_eq!(wan.delay_to(2), Duration::ZERO);
        assert_eq!(wan.delay_to(3), Duration::from_millis(70));
    }

    #[test]
    fn a_peer_with_no_known_region_is_in_another_region() {
        let wan = eu_with_peers(70);
        assert!(wan.is_remote(9));
        assert_eq!(wan.delay_to(9), Duration::from_millis(70));
        let alone = SimulatedWan::new(WanConfig {
            latency: Duration::from_millis(5),
            ..WanConfig::alone(1)
        });
        assert_eq!(alone.region(), "member-1");
        assert!(alone.is_remote(2) && alone.is_remote(3));
    }

    #[test]
    fn an_isolated_member_talks_only_within_its_region() {
        let wan = eu_with_peers(0);
        assert!(wan.may_send_to(3) && wan.accepts(Some("us-east")));
        wan.set_isolated(true);
        assert!(wan.may_send_to(2));
        assert!(!wan.may_send_to(3));
        assert!(wan.accepts(Some("eu-west")));
        assert!(!wan.accepts(Some("us-east")));
        assert!(
            !wan.accepts(None),
            "a raft sender that does not say is remote"
        );
        wan.set_isolated(false);
        assert!(wan.may_send_to(3) && wan.accepts(Some("us-east")));
    }

    #[test]
    fn an_isolated_member_serves_clients_that_do_not_declare_a_region() {
        let wan = eu_with_peers(0);
        wan.set_isolated(true);
        assert!(wan.accepts_client(None));
        assert!(wan.accepts_client(Some("eu-west")));
        assert!(!wan.accepts_client(Some("us-east")));
        assert_eq!(
            wan.state(),
            PartitionState {
                isolated: true,
                region: "eu-west".into()
            }
        );
    }

    #[test]
    fn peer_regions_parse_and_own_region_must_agree() {
        let items: Vec<String> = ["1=eu-west", "2=us-east", "3=ap-south"]
            .map(String::from)
            .to_vec();
        let regions = parse_peer_regions(&items).unwrap();
        assert_eq!(regions[&2], "us-east");
        assert!(parse_peer_regions(&["1".into()]).is_err());
        assert!(parse_peer_regions(&["x=eu".into()]).is_err());
        assert!(parse_peer_regions(&["1=".into()]).is_err());
        assert!(parse_peer_regions(&["1=a".into(), "1=b".into()]).is_err());

        assert_eq!(own_region(2, None, &regions).unwrap(), "us-east");
        assert_eq!(own_region(2, Some("us-east"), &regions).unwrap(), "us-east");
        assert!(own_region(2, Some("eu-west"), &regions).is_err());
        assert_eq!(own_region(7, None, &regions).unwrap(), "member-7");
        assert_eq!(own_region(7, Some("mars"), &regions).unwrap(), "mars");
    }

    #[test]
    fn a_refusal_is_recognisable_as_a_partition() {
        let wan = eu_with_peers(0);
        let refusal = wan.refusal(Some("us-east"));
        let status = refusal.status().as_u16();
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in refusal.headers() {
            headers.insert(k.clone(), v.clone());
        }
        assert!(is_partition_refusal(status, &headers));
        assert!(!is_partition_refusal(
            503,
            &reqwest::header::HeaderMap::new()
        ));
    }
}
