//! The groups of a deployment that runs one Raft group per home region
//! (docs/decisions/0063-a-raft-group-per-home-region.md), as a client sees
//! them: a [`StoreClient`] per group, and which group each tenant lives in.
//!
//! Every member serves the directory at its listeners' root and group
//! `name` under `/groups/<name>`, so a group's endpoints are the members'
//! endpoints with that suffix, in the same order (the caller's region's
//! member first). A tenant lives in the directory unless the directory has
//! assigned it to another group; an assignment never changes, so a positive
//! answer is kept for good. A negative one is kept for
//! [`UNASSIGNED_KEPT_FOR`] only: a claim sent to the directory after the
//! tenant was assigned is refused (`Reply::OtherGroup`, which the caller
//! hands to [`StoreGroups::learn`]), but a read there would simply find
//! nothing. Tenants are assigned as they are placed, before their first
//! payment, so that window is only a bound.
//!
//! A deployment with one group is a `StoreGroups` with no other groups:
//! every tenant lives in the directory and nothing is ever looked up.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::client::{ClientError, ClientOptions, StoreClient};

/// How long "not assigned" is believed before the directory is asked again.
pub const UNASSIGNED_KEPT_FOR: Duration = Duration::from_secs(10);

/// One client per group, and where each tenant lives.
#[derive(Debug)]
pub struct StoreGroups {
    directory: Arc<StoreClient>,
    others: BTreeMap<String, Arc<StoreClient>>,
    assignments: Mutex<HashMap<String, Assignment>>,
}

#[derive(Debug, Clone)]
enum Assignment {
    To(String),
    NoneAsOf(Instant),
}

/// The directory's name among the groups: the `group` label of its
/// metrics and its name in a node's readiness headers.
pub const DIRECTORY: &str = "directory";

/// A group's endpoints: the members' with `/groups/<name>` appended.
pub fn group_endpoints(endpoints: &[String], group: &str) -> Vec<String> {
    endpoints
        .iter()
        .map(|e| {
            format!(
                "{}{}",
                e.trim_end_matches('/'),
                crate::protocol::group_path(group)
            )
        })
        .collect()
}

impl StoreGroups {
    /// Clients of the directory at `endpoints` and of each of `groups`
    /// there, all with `options`.
    pub fn new(
        endpoints: &[String],
        groups: &[String],
        options: ClientOptions,
    ) -> reqwest::Result<Self> {
        let directory = Arc::new(StoreClient::new(endpoints, options.clone())?);
        let mut others = BTreeMap::new();
        for group in groups {
            let client = StoreClient::new(&group_endpoints(endpoints, group), options.clone())?;
            others.insert(group.clone(), Arc::new(client));
        }
        Ok(Self {
            directory,
            others,
            assignments: Mutex::default(),
        })
    }

    /// The directory's client: assignments, region status, and the
    /// tenants it keeps.
    pub fn directory(&self) -> &Arc<StoreClient> {
        &self.directory
    }

    /// The client of group `name` (`None`: no such group here).
    pub fn group(&self, name: &str) -> Option<&Arc<StoreClient>> {
        self.others.get(name)
    }

    /// Whether this deployment runs more than one group.
    pub fn is_split(&self) -> bool {
        !self.others.is_empty()
    }

    /// Every group's client, the directory first, with its name (`None`:
    /// the directory): what sweeps, scans and failovers go through.
    pub fn all(&self) -> impl Iterator<Item = (Option<&str>, &Arc<StoreClient>)> {
        std::iter::once((None, &self.directory))
            .chain(self.others.iter().map(|(n, c)| (Some(n.as_str()), c)))
    }

    /// The client of the group `tenant` lives in, asking the directory the
    /// first time (and again once a negative answer is old).
    pub async fn of_tenant(&self, tenant: &str) -> Result<&Arc<StoreClient>, ClientError> {
        if !self.is_split() {
            return Ok(&self.directory);
        }
        let known = self.assignments().get(tenant).cloned();
        let group = match known {
            Some(Assignment::To(group)) => Some(group),
            Some(Assignment::NoneAsOf(at)) if at.elapsed() < UNASSIGNED_KEPT_FOR => None,
            _ => {
                let group = self.directory.assignment(tenant).await?;
                let entry = match &group {
                    Some(g) => Assignment::To(g.clone()),
                    None => Assignment::NoneAsOf(Instant::now()),
                };
                self.assignments().insert(tenant.to_owned(), entry);
                group
            }
        };
        self.client_of(group.as_deref())
    }

    /// What a group's `OtherGroup` answer said: `tenant` lives in `group`.
    /// Returns that group's client.
    pub fn learn(&self, tenant: &str, group: &str) -> Result<&Arc<StoreClient>, ClientError> {
        let client = self.client_of(Some(group))?;
        self.assignments()
            .insert(tenant.to_owned(), Assignment::To(group.to_owned()));
        Ok(client)
    }

    /// Places `tenant` for the first time with `home` and `standbys`, in
    /// `home`'s group when this deployment has one: the directory assigns
    /// the tenant there first, then the placement is written there. A
    /// tenant the directory already holds state of stays in the directory;
    /// one already assigned stays in its group. Answers as
    /// [`StoreClient::set_placement`] with expected epoch 0: `Placement`,
    /// or `PlacementConflict` when it already had one. While the directory
    /// does not take assignments yet (a cluster moving to wire version 5,
    /// within a second of its start), asks again until the client's
    /// deadline.
    pub async fn place_first(
        &self,
        tenant: &str,
        home: &str,
        standbys: &[String],
    ) -> Result<crate::command::Reply, ClientError> {
        use crate::command::Reply;
        let group = if self.others.contains_key(home) {
            let deadline = Instant::now() + self.directory.options().deadline;
            loop {
                match self.directory.assign_tenant(tenant, home).await? {
                    Reply::Assigned { group } => break Some(group),
                    Reply::TenantInUse { assigned } => break assigned,
                    Reply::NotAgreed { .. } if Instant::now() < deadline => {
                        // Polling the cluster's move to the new version.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    other => {
                        return Err(ClientError::Unavailable(format!(
                            "assigning {tenant} to {home}: unexpected answer {other:?}"
                        )));
                    }
                }
            }
        } else {
            None
        };
        if let Some(g) = &group {
            self.assignments()
                .insert(tenant.to_owned(), Assignment::To(g.clone()));
        }
        self.client_of(group.as_deref())?
            .set_placement(tenant, 0, home, standbys)
            .await
    }

    fn client_of(&self, group: Option<&str>) -> Result<&Arc<StoreClient>, ClientError> {
        match group {
            None => Ok(&self.directory),
            Some(name) => self.others.get(name).ok_or_else(|| {
                ClientError::Unavailable(format!(
                    "the directory places a tenant in group {name:?}, which this process was not configured with (--store-groups)"
                ))
            }),
        }
    }

    fn assignments(&self) -> std::sync::MutexGuard<'_, HashMap<String, Assignment>> {
        self.assignments.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_groups_endpoints_are_the_members_under_its_path() {
        assert_eq!(
            group_endpoints(
                &["127.0.0.1:7101".into(), "https://m2:7101/".into()],
                "us-east"
            ),
            [
                "127.0.0.1:7101/groups/us-east",
                "https://m2:7101/groups/us-east"
            ]
        );
    }

    #[tokio::test]
    async fn one_group_needs_no_lookup_and_a_learned_group_is_kept() {
        let single =
            StoreGroups::new(&["127.0.0.1:1".into()], &[], ClientOptions::default()).unwrap();
        assert!(Arc::ptr_eq(
            single.of_tenant("acme").await.unwrap(),
            single.directory()
        ));
        let split = StoreGroups::new(
            &["127.0.0.1:1".into()],
            &["us-east".into()],
            ClientOptions::default(),
        )
        .unwrap();
        let us = split.learn("acme", "us-east").unwrap().clone();
        // Known now: no member is asked (none listens on port 1).
        assert!(Arc::ptr_eq(split.of_tenant("acme").await.unwrap(), &us));
        assert!(matches!(
            split.learn("acme", "nowhere"),
            Err(ClientError::Unavailable(_))
        ));
        assert!(Arc::ptr_eq(split.of_tenant("acme").await.unwrap(), &us));
    }
}
