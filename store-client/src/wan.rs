//! The client's side of raft-store's simulated WAN: the headers a client
//! sends and recognises, and the partition switch's messages. The member
//! enforces the WAN (`once_raft_store::wan`); a client only declares its
//! region ([`CLIENT_REGION_HEADER`]) and tells a partition refusal
//! ([`is_partition_refusal`]) from a failure of a delivered request.

use serde::{Deserialize, Serialize};

/// The caller's region, on client API requests of a `StoreClient` that
/// declares one. Requests without it are always served.
pub const CLIENT_REGION_HEADER: &str = "x-once-client-region";
/// On a refusal caused by a partition: the sender treats it as unreachable
/// (nothing was delivered), not as a failure of a delivered request.
pub const PARTITIONED_HEADER: &str = "x-once-partitioned";
/// `GET` the partition state, `POST` a [`SetPartition`] to change it.
pub const PARTITION_PATH: &str = "/admin/partition";

/// The partition state as `/admin/partition` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    /// Cut off from every other region.
    pub isolated: bool,
    /// Other regions cut off from this member, both ways, sorted.
    #[serde(default)]
    pub cut_regions: Vec<String>,
    /// Other regions whose requests this member refuses while it still
    /// sends to them (a one-way cut), sorted.
    #[serde(default)]
    pub refuse_from: Vec<String>,
    /// This member's own region.
    #[serde(default)]
    pub region: String,
}

/// The request body of `POST /admin/partition`: each field given replaces
/// that part of the state, a field left out keeps it, so the original
/// `{"isolated": bool}` still only flips isolation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetPartition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolated: Option<bool>,
    /// The whole new set of cut regions (`[]` heals them all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_regions: Option<Vec<String>>,
    /// The whole new set of regions refused one way (`[]` heals them all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refuse_from: Option<Vec<String>>,
}

impl SetPartition {
    /// `{"isolated": isolated}`.
    pub fn isolated(isolated: bool) -> Self {
        Self {
            isolated: Some(isolated),
            ..Self::default()
        }
    }

    /// `{"cut_regions": regions}`.
    pub fn cut(regions: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            cut_regions: Some(regions.into_iter().map(Into::into).collect()),
            ..Self::default()
        }
    }

    /// `{"refuse_from": regions}`.
    pub fn refuse_from(regions: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            refuse_from: Some(regions.into_iter().map(Into::into).collect()),
            ..Self::default()
        }
    }
}

/// Whether an answer is a partition refusal (see [`PARTITIONED_HEADER`]).
pub fn is_partition_refusal(status: u16, headers: &reqwest::header::HeaderMap) -> bool {
    status == reqwest::StatusCode::SERVICE_UNAVAILABLE.as_u16()
        && headers.contains_key(PARTITIONED_HEADER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partition_bodies_parse_old_and_new_and_refuse_typos() {
        let old: SetPartition = serde_json::from_str(r#"{"isolated": true}"#).unwrap();
        assert_eq!(old, SetPartition::isolated(true));
        let new: SetPartition =
            serde_json::from_str(r#"{"isolated": false, "cut_regions": ["eu-west"]}"#).unwrap();
        assert_eq!(new.isolated, Some(false));
        assert_eq!(
            new.cut_regions.as_deref(),
            Some(&["eu-west".to_owned()][..])
        );
        assert_eq!(new.refuse_from, None, "left out: kept as it is");
        let one_way: SetPartition =
            serde_json::from_str(r#"{"refuse_from": ["us-east"]}"#).unwrap();
        assert_eq!(one_way, SetPartition::refuse_from(["us-east"]));
        assert_eq!(
            serde_json::to_value(&one_way).unwrap(),
            serde_json::json!({"refuse_from": ["us-east"]}),
            "only the fields given are sent"
        );
        assert!(serde_json::from_str::<SetPartition>(r#"{"cut_region": ["eu"]}"#).is_err());
        // A state from before `cut_regions` and `refuse_from` existed still reads.
        let state: PartitionState =
            serde_json::from_str(r#"{"isolated": true, "region": "eu"}"#).unwrap();
        assert!(state.cut_regions.is_empty());
        assert!(state.refuse_from.is_empty());
    }
}
