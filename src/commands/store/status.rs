//! `once store status`: every Raft group of a cluster as each member sees
//! it — the directory and one group per home region after the first
//! (decision 0063) — with its leader, term and each follower's lag, as a
//! table, or with `--json` as JSON Lines: each member's status of each
//! group, its `group` added (what scripts read line by line). A member that does not
//! answer is a row saying why, and the command exits non-zero after
//! printing everything it could read; a TLS failure names the certificate
//! flags.

use once_store_client::admin::{AdminError, Operator};
use once_store_client::groups::{DIRECTORY, group_endpoints};
use once_store_client::protocol::Status;
use serde::Serialize;

use crate::commands::cluster_file::{TLS_HINT, is_tls_failure};

/// One member's answer for one group.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum MemberStatus {
    Answered {
        endpoint: String,
        status: Box<Status>,
    },
    Unreachable {
        endpoint: String,
        error: String,
    },
}

/// A group as its members answered.
#[derive(Debug, Serialize)]
pub struct GroupStatus {
    pub group: String,
    /// The leader the members name (the leader's own word first).
    pub leader: Option<u64>,
    pub term: Option<u64>,
    pub members: Vec<MemberStatus>,
}

impl GroupStatus {
    fn answered(&self) -> impl Iterator<Item = &Status> {
        self.members.iter().filter_map(|m| match m {
            MemberStatus::Answered { status, .. } => Some(status.as_ref()),
            MemberStatus::Unreachable { .. } => None,
        })
    }

    /// The status of the member that says it leads, if it answered.
    fn leader_status(&self) -> Option<&Status> {
        self.answered().find(|s| s.leader == Some(s.id))
    }
}

/// What `once store status` found, and whether a member could not be read.
#[derive(Debug, Serialize)]
pub struct ClusterStatus {
    pub groups: Vec<GroupStatus>,
}

/// Asks every member of `endpoints` for the directory's and every group
/// of `groups`'s status.
pub async fn read(observer: &Operator, endpoints: &[String], groups: &[String]) -> ClusterStatus {
    let mut names = vec![DIRECTORY.to_owned()];
    names.extend(groups.iter().cloned());
    let mut statuses = Vec::new();
    for name in names {
        let urls = if name == DIRECTORY {
            endpoints.to_vec()
        } else {
            group_endpoints(endpoints, &name)
        };
        let mut members = Vec::new();
        for url in urls {
            members.push(match observer.status(&url).await {
                Ok(status) => MemberStatus::Answered {
                    endpoint: url,
                    status: Box::new(status),
                },
                Err(e) => MemberStatus::Unreachable {
                    endpoint: url,
                    error: describe(&e),
                },
            });
        }
        let mut group = GroupStatus {
            group: name,
            leader: None,
            term: None,
            members,
        };
        let (leader, term) = match group.leader_status() {
            Some(s) => (Some(s.id), Some(s.term)),
            None => (
                group.answered().find_map(|s| s.leader),
                group.answered().map(|s| s.term).max(),
            ),
        };
        (group.leader, group.term) = (leader, term);
        statuses.push(group);
    }
    ClusterStatus { groups: statuses }
}

/// An error's whole chain, with what to pass when it is a TLS failure.
fn describe(error: &AdminError) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    if is_tls_failure(error) {
        text.push_str(" — ");
        text.push_str(TLS_HINT);
    }
    text
}

impl ClusterStatus {
    /// The members that did not answer, as `endpoint: error`.
    pub fn unreachable(&self) -> Vec<String> {
        self.groups
            .iter()
            .flat_map(|g| &g.members)
            .filter_map(|m| match m {
                MemberStatus::Unreachable { endpoint, error } => {
                    Some(format!("{endpoint}: {error}"))
                }
                MemberStatus::Answered { .. } => None,
            })
            .collect()
    }

    /// `--json`: a line per group and member, the member's status with
    /// `group` added, or `{group, endpoint, error}`.
    pub fn json_lines(&self) -> anyhow::Result<String> {
        let mut out = String::new();
        for group in &self.groups {
            for member in &group.members {
                let mut value = serde_json::to_value(member)?;
                let line = match (value.as_object_mut(), member) {
                    (Some(_), MemberStatus::Answered { status, .. }) => {
                        let mut line = serde_json::to_value(status)?;
                        if let Some(object) = line.as_object_mut() {
                            object.insert("group".into(), group.group.clone().into());
                        }
                        line
                    }
                    (Some(object), MemberStatus::Unreachable { .. }) => {
                        object.insert("group".into(), group.group.clone().into());
                        value
                    }
                    (None, _) => value,
                };
                out.push_str(&line.to_string());
                out.push('\n');
            }
        }
        Ok(out)
    }

    /// The readable table: a line per group and member.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<12} {:>6}  {:<10} {:<10} {:>6} {:>6} {:>10} {:>10} {:>6}\n",
            "group", "member", "region", "state", "leader", "term", "last log", "applied", "lag"
        );
        let dash = || "-".to_owned();
        let opt = |v: Option<u64>| v.map_or_else(dash, |v| v.to_string());
        for group in &self.groups {
            let leader = group.leader_status();
            for member in &group.members {
                match member {
                    MemberStatus::Answered { status: s, .. } => {
                        // The leader's word on how far each follower is behind.
                        let lag = match leader {
                            Some(l) if l.id == s.id => dash(),
                            Some(l) => match l.follower_lag.get(&s.id) {
                                Some(Some(lag)) => lag.to_string(),
                                Some(None) => "?".to_owned(),
                                None => dash(),
                            },
                            None => "?".to_owned(),
                        };
                        out.push_str(&format!(
                            "{:<12} {:>6}  {:<10} {:<10} {:>6} {:>6} {:>10} {:>10} {:>6}\n",
                            group.group,
                            s.id,
                            s.region.as_deref().unwrap_or("-"),
                            s.state.to_ascii_lowercase(),
                            opt(s.leader),
                            s.term,
                            opt(s.last_log_index),
                            opt(s.applied_index),
                            lag
                        ));
                    }
                    MemberStatus::Unreachable { endpoint, error } => {
                        out.push_str(&format!(
                            "{:<12} {:>6}  unreachable {endpoint}: {error}\n",
                            group.group, "?"
                        ));
                    }
                }
            }
            if group.leader.is_none() {
                out.push_str(&format!(
                    "{:<12} no leader among the members that answered\n",
                    group.group
                ));
            }
        }
        out
    }
}
