//! A simulated WAN inside the project's own transports, so latency and
//! partition drills run on one machine without `tc netem` or a firewall.
//!
//! Every member has a region label. Between members of *different* regions:
//!
//! - **latency**: each Raft RPC waits `latency` before it is sent (one WAN
//!   round trip per RPC; the answer itself comes back at once);
//! - **partition**: while a member is *isolated* it sends no Raft RPC to
//!   another region and refuses every one from another region, and its
//!   client API refuses clients that declare another region. A member may
//!   also be told that some *other* regions are cut off from it
//!   (`cut_regions`): the same, per pair — no Raft RPC to or from members
//!   of those regions, no client that declares one of them. A drill
//!   partitioning region R isolates R's member and cuts R at every other
//!   member, so the cut holds from both sides whichever side sends first.
//!   Processes keep running; only the links between regions are cut.
//! - **one-way partition**: a member told to refuse some other regions
//!   (`refuse_from`) refuses Raft RPC and clients declaring them, as for a
//!   cut, but still sends to them. Traffic flows one way: requests this
//!   member starts reach the refused region (and their answers come back
//!   on the same exchange); requests that region starts do not reach it.
//!
//! ```text
//!   member 1 (eu-west) ── Raft RPC + X-Once-Region: eu-west ──► member 2 (us-east)
//!        │ sleep(latency) before sending             │ isolated and eu-west ≠ us-east,
//!        │ isolated, or us-east cut?                 │ or eu-west in cut_regions
//!        │   → Unreachable, nothing sent             │ or in refuse_from?
//!        │ (us-east in refuse_from: sent all the     └─► 503 + X-Once-Partitioned
//!        │  same; only member 2's requests to            (the sender maps it to Unreachable)
//!        ▼  member 1 are refused)
//! ```
//!
//! The decisions ([`SimulatedWan::delay_to`], [`SimulatedWan::may_send_to`],
//! [`SimulatedWan::accepts`]) are pure functions of the configuration and
//! the partition state; the transports ([`crate::network`],
//! [`crate::raft_service`], [`crate::api_service`]) only act on them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

pub use once_store_client::wan::{
    CLIENT_REGION_HEADER, PARTITION_PATH, PARTITIONED_HEADER, PartitionState, SetPartition,
    is_partition_refusal,
};

use crate::types::NodeId;

/// The sender's region, on every Raft RPC (and bootstrap's probe).
pub const REGION_HEADER: &str = "x-once-region";

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

    /// The cluster's regions as this member is configured: its own and its
    /// peers', once `--peer-regions` names any (empty otherwise: a member
    /// told no regions declares none, docs/decisions/0098).
    pub fn cluster_regions(&self) -> std::collections::BTreeSet<String> {
        if self.peer_regions.is_empty() {
            return Default::default();
        }
        self.peer_regions
            .values()
            .cloned()
            .chain(std::iter::once(self.region.clone()))
            .collect()
    }
}

/// A partition change the member refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    #[error(
        "region {0:?} is this member's own region: a member cannot be cut off from itself (use \"isolated\" to cut it off from the others)"
    )]
    OwnRegion(String),
    #[error("a cut or refused region must have a name")]
    EmptyRegion,
}

/// One member's view of the simulated WAN, shared by its Raft sender, its
/// Raft listener and its client API.
#[derive(Debug)]
pub struct SimulatedWan {
    config: WanConfig,
    /// Read on every RPC and flipped by an operator; an atomic, since no
    /// other state has to change with it.
    isolated: AtomicBool,
    /// Other regions cut off from this member, both ways or one way. Read
    /// on every RPC, written only by an operator: a std `RwLock`, never
    /// held across an await, so readers never wait on each other. One lock
    /// for both sets, so a change of both is seen whole.
    cuts: RwLock<Cuts>,
}

/// The regions a member does not talk to, apart from its isolation.
#[derive(Debug, Default)]
struct Cuts {
    /// Neither sent to nor accepted from.
    both_ways: BTreeSet<String>,
    /// Accepted from no more, still sent to.
    refused: BTreeSet<String>,
}

impl SimulatedWan {
    pub fn new(config: WanConfig) -> Self {
        Self {
            config,
            isolated: AtomicBool::new(false),
            cuts: RwLock::new(Cuts::default()),
        }
    }

    pub fn region(&self) -> &str {
        &self.config.region
    }

    /// The first of `members` in `region`, this member (`me`) by its own
    /// region and the others by [`Self::region_of`].
    pub fn member_in(
        &self,
        region: &str,
        me: NodeId,
        mut members: impl Iterator<Item = NodeId>,
    ) -> Option<NodeId> {
        members.find(|id| {
            if *id == me {
                self.region() == region
            } else {
                self.region_of(*id) == region
            }
        })
    }

    /// Whether `peer` is in another region than this member.
    pub fn is_remote(&self, peer: NodeId) -> bool {
        self.config
            .peer_regions
            .get(&peer)
            .is_none_or(|r| *r != self.config.region)
    }

    /// The region of `peer`: as listed, else `member-<id>` — the region
    /// that member gives itself when nothing names one ([`own_region`]).
    pub fn region_of(&self, peer: NodeId) -> String {
        self.config
            .peer_regions
            .get(&peer)
            .cloned()
            .unwrap_or_else(|| format!("member-{peer}"))
    }

    /// How long an RPC to `peer` waits before it is sent.
    pub fn delay_to(&self, peer: NodeId) -> Duration {
        if self.is_remote(peer) {
            self.config.latency
        } else {
            Duration::ZERO
        }
    }

    /// Whether an RPC to `peer` may be sent now: not while this member is
    /// isolated and the peer is remote, nor while the peer's region is cut.
    /// A region this member only refuses (`refuse_from`) is still sent to.
    pub fn may_send_to(&self, peer: NodeId) -> bool {
        if self.is_isolated() && self.is_remote(peer) {
            return false;
        }
        !self.is_cut(&self.region_of(peer))
    }

    /// Whether a request from `region` is accepted now: not across this
    /// member's isolation, nor from a region cut (`cut_regions`) or refused
    /// (`refuse_from`). `None` is a sender that does not say: for Raft RPC
    /// every member says, so it counts as another region; for the client
    /// API it is served (see [`Self::accepts_client`]).
    pub fn accepts(&self, region: Option<&str>) -> bool {
        let own = region == Some(self.config.region.as_str());
        if self.is_isolated() {
            return own;
        }
        region.is_none_or(|r| {
            let cuts = self.read_cuts();
            !cuts.both_ways.contains(r) && !cuts.refused.contains(r)
        })
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

    /// Whether `region` is one of the regions cut off from this member
    /// both ways.
    pub fn is_cut(&self, region: &str) -> bool {
        self.read_cuts().both_ways.contains(region)
    }

    /// Whether requests from `region` are refused while this member still
    /// sends to it (a one-way cut).
    pub fn is_refused(&self, region: &str) -> bool {
        self.read_cuts().refused.contains(region)
    }

    /// Cuts exactly `regions` off from this member, both ways (`[]` heals
    /// them all). This member's own region is refused: cutting it would
    /// cut the member off from its own region's peers and clients, which
    /// no network partition does.
    pub fn set_cut_regions(
        &self,
        regions: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<(), PartitionError> {
        let regions = self.other_regions(regions)?;
        self.write_cuts().both_ways = regions;
        Ok(())
    }

    /// Refuses exactly `regions`' requests from now on while still sending
    /// to them (`[]` heals them all); same rules as
    /// [`Self::set_cut_regions`].
    pub fn set_refused_regions(
        &self,
        regions: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<(), PartitionError> {
        let regions = self.other_regions(regions)?;
        self.write_cuts().refused = regions;
        Ok(())
    }

    /// `regions` trimmed, each named and none this member's own.
    fn other_regions(
        &self,
        regions: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<BTreeSet<String>, PartitionError> {
        let mut set = BTreeSet::new();
        for region in regions {
            let region: String = region.into();
            let region = region.trim();
            if region.is_empty() {
                return Err(PartitionError::EmptyRegion);
            }
            if region == self.config.region {
                return Err(PartitionError::OwnRegion(region.to_owned()));
            }
            set.insert(region.to_owned());
        }
        Ok(set)
    }

    /// Applies `change` (all of it or, when refused, none of it).
    pub fn apply(&self, change: SetPartition) -> Result<PartitionState, PartitionError> {
        // Every part checked before any is written.
        let both_ways = change
            .cut_regions
            .map(|r| self.other_regions(r))
            .transpose()?;
        let refused = change
            .refuse_from
            .map(|r| self.other_regions(r))
            .transpose()?;
        {
            let mut cuts = self.write_cuts();
            if let Some(both_ways) = both_ways {
                cuts.both_ways = both_ways;
            }
            if let Some(refused) = refused {
                cuts.refused = refused;
            }
        }
        if let Some(isolated) = change.isolated {
            self.set_isolated(isolated);
        }
        Ok(self.state())
    }

    pub fn state(&self) -> PartitionState {
        let cuts = self.read_cuts();
        PartitionState {
            isolated: self.is_isolated(),
            cut_regions: cuts.both_ways.iter().cloned().collect(),
            refuse_from: cuts.refused.iter().cloned().collect(),
            region: self.config.region.clone(),
        }
    }

    // A panic while holding the lock cannot leave a half-written set (each
    // is replaced whole), so a poisoned lock is still good.
    fn read_cuts(&self) -> std::sync::RwLockReadGuard<'_, Cuts> {
        self.cuts
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_cuts(&self) -> std::sync::RwLockWriteGuard<'_, Cuts> {
        self.cuts
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
                cut_regions: vec![],
                refuse_from: vec![],
                region: "eu-west".into()
            }
        );
    }

    #[test]
    fn a_cut_region_is_refused_both_ways_and_the_others_still_talk() {
        let wan = SimulatedWan::new(WanConfig {
            region: "eu-west".into(),
            peer_regions: BTreeMap::from([
                (1, "eu-west".into()),
                (2, "us-east".into()),
                (3, "ap-south".into()),
            ]),
            latency: Duration::ZERO,
        });
        wan.set_cut_regions(["ap-south"]).unwrap();
        assert!(!wan.may_send_to(3), "no RPC to the cut region");
        assert!(wan.may_send_to(2) && wan.may_send_to(1));
        assert!(!wan.accepts(Some("ap-south")), "no RPC from the cut region");
        assert!(wan.accepts(Some("us-east")) && wan.accepts(Some("eu-west")));
        assert!(!wan.is_isolated());
        wan.set_cut_regions(Vec::<String>::new()).unwrap();
        assert!(wan.may_send_to(3) && wan.accepts(Some("ap-south")));
    }

    #[test]
    fn clients_declaring_a_cut_region_are_refused_and_undeclared_ones_served() {
        let wan = eu_with_peers(0);
        wan.set_cut_regions(["us-east"]).unwrap();
        assert!(!wan.accepts_client(Some("us-east")));
        assert!(wan.accepts_client(Some("eu-west")));
        assert!(wan.accepts_client(Some("ap-south")));
        assert!(wan.accepts_client(None));
    }

    #[test]
    fn a_peer_with_no_known_region_is_cut_by_the_name_it_gives_itself() {
        let wan = eu_with_peers(0);
        assert_eq!(wan.region_of(9), "member-9");
        wan.set_cut_regions(["member-9"]).unwrap();
        assert!(!wan.may_send_to(9));
        assert!(wan.may_send_to(3));
    }

    #[test]
    fn a_member_cannot_cut_its_own_region_and_a_refused_change_changes_nothing() {
        let wan = eu_with_peers(0);
        wan.set_cut_regions(["us-east"]).unwrap();
        assert_eq!(
            wan.apply(SetPartition {
                isolated: Some(true),
                cut_regions: Some(vec!["ap-south".into(), "eu-west".into()]),
                refuse_from: None,
            }),
            Err(PartitionError::OwnRegion("eu-west".into()))
        );
        assert_eq!(
            wan.apply(SetPartition::cut([" "])),
            Err(PartitionError::EmptyRegion)
        );
        assert!(!wan.is_isolated());
        assert_eq!(wan.state().cut_regions, ["us-east"]);
    }

    #[test]
    fn a_member_cannot_refuse_its_own_region_and_a_refused_change_changes_nothing() {
        let wan = eu_with_peers(0);
        assert_eq!(
            wan.apply(SetPartition::refuse_from(["eu-west"])),
            Err(PartitionError::OwnRegion("eu-west".into()))
        );
        assert_eq!(
            wan.apply(SetPartition::refuse_from([""])),
            Err(PartitionError::EmptyRegion)
        );
        // A valid cut next to an invalid refusal: neither is applied.
        assert_eq!(
            wan.apply(SetPartition {
                isolated: Some(true),
                cut_regions: Some(vec!["ap-south".into()]),
                refuse_from: Some(vec!["eu-west".into()]),
            }),
            Err(PartitionError::OwnRegion("eu-west".into()))
        );
        let state = wan.state();
        assert!(!state.isolated);
        assert!(state.cut_regions.is_empty() && state.refuse_from.is_empty());
    }

    #[test]
    fn a_refused_region_is_refused_but_still_sent_to() {
        let wan = eu_with_peers(0);
        let state = wan.apply(SetPartition::refuse_from(["us-east"])).unwrap();
        assert_eq!(state.refuse_from, ["us-east"]);
        assert!(state.cut_regions.is_empty(), "not a two-way cut");
        assert!(wan.may_send_to(3), "RPCs to us-east still go out");
        assert!(
            !wan.accepts(Some("us-east")),
            "RPCs from us-east do not get in"
        );
        assert!(!wan.accepts_client(Some("us-east")));
        assert!(wan.accepts(Some("eu-west")) && wan.accepts(Some("ap-south")));
        assert!(wan.accepts_client(None), "undeclared clients are served");
        assert!(wan.is_refused("us-east") && !wan.is_cut("us-east"));
        wan.apply(SetPartition::refuse_from(Vec::<String>::new()))
            .unwrap();
        assert!(wan.accepts(Some("us-east")), "healed");
    }

    #[test]
    fn refusals_and_cuts_are_changed_apart() {
        let wan = eu_with_peers(0);
        wan.apply(SetPartition::cut(["ap-south"])).unwrap();
        let state = wan.apply(SetPartition::refuse_from(["us-east"])).unwrap();
        assert_eq!(state.cut_regions, ["ap-south"], "the cut stays");
        assert_eq!(state.refuse_from, ["us-east"]);
        let state = wan.apply(SetPartition::cut(Vec::<String>::new())).unwrap();
        assert!(state.cut_regions.is_empty());
        assert_eq!(state.refuse_from, ["us-east"], "the refusal stays");
        // A region both cut and refused is simply cut.
        wan.apply(SetPartition::cut(["us-east"])).unwrap();
        assert!(!wan.may_send_to(3) && !wan.accepts(Some("us-east")));
    }

    #[test]
    fn a_change_replaces_only_the_fields_it_names() {
        let wan = eu_with_peers(0);
        let state = wan
            .apply(SetPartition::cut(["us-east", "ap-south"]))
            .unwrap();
        assert_eq!(state.cut_regions, ["ap-south", "us-east"]);
        assert!(!state.isolated);
        let state = wan.apply(SetPartition::isolated(true)).unwrap();
        assert!(state.isolated, "isolation flips");
        assert_eq!(state.cut_regions, ["ap-south", "us-east"], "cuts stay");
        let healed = wan
            .apply(SetPartition {
                isolated: Some(false),
                cut_regions: Some(vec![]),
                refuse_from: Some(vec![]),
            })
            .unwrap();
        assert_eq!(
            healed,
            PartitionState {
                isolated: false,
                cut_regions: vec![],
                refuse_from: vec![],
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
