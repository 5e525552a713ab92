//! What a leader does on its own, on a timer: moving the cluster to the
//! newest wire version every member speaks, declaring the regions its
//! members are configured with (docs/decisions/0098), forgetting the dedup entries of
//! clients gone idle (docs/decisions/0041-wire-versions.md), and handing
//! the lead back to the preferred member once it has caught up after an
//! election put the lead elsewhere — for a home region's group, the member
//! of the region where the group's tenants live now
//! (docs/decisions/0063-a-raft-group-per-home-region.md).
//!
//! Only the leader proposes, through the same group commit as clients, as
//! a client of its own (a random id per process, as a node's store client
//! has). Each round reads this member's state first and proposes only what
//! would change something, so an idle cluster's log does not grow by an
//! entry a second. A round the member does not lead in does nothing; a
//! leader that loses its leadership mid-round gets `ForwardToLeader` and
//! the new leader's next round does the work.

use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;

use crate::clock::ClockGuard;
use crate::command::{ClientRequest, Op, Reply};
use crate::group_commit::GroupCommit;
use crate::leadership::succession::{FollowTenants, Residence};
use crate::network::Network;
use crate::protocol::WriteAnswer;
use crate::state_machine::StateMachine;
use crate::tasks::{GroupTasks, Lifetime};
use crate::types::{NodeId, Raft};
use crate::wire_versions::WireVersions;

/// Most clients one [`Op::ForgetIdleClients`] forgets.
const FORGET_LIMIT: u32 = 1_000;

#[derive(Debug, Clone)]
pub struct Settings {
    /// How often the leader looks.
    pub every: Duration,
    /// Forget a client's dedup entries once it has been idle this long
    /// (`None`: never). Must stay far above the longest a client retries
    /// one command.
    pub forget_clients_after: Option<Duration>,
    /// The member that should lead whenever it can (the region most
    /// traffic comes from). A leader that is not it asks it to campaign
    /// once it holds every entry, at most once per [`HANDOFF_EVERY`].
    pub preferred_leader: Option<NodeId>,
    /// A home region's group: the lead goes to the member of the region
    /// where most of the group's tenants live now, instead of a fixed one
    /// (docs/decisions/0063-a-raft-group-per-home-region.md).
    pub follow_tenants: Option<FollowTenants>,
}

/// Least time between two hand-offs of the lead.
pub const HANDOFF_EVERY: Duration = Duration::from_secs(10);

/// What the leader's rounds work with; [`Housekeeping::start`] runs them.
pub struct Housekeeping {
    pub raft: Raft,
    pub state_machine: StateMachine,
    pub group_commit: GroupCommit,
    pub versions: Arc<WireVersions>,
    pub clock: Arc<ClockGuard>,
    /// To ask the preferred member to campaign.
    pub network: Network,
    pub settings: Settings,
    /// The cluster's regions as this member is configured
    /// ([`crate::wan::WanConfig::cluster_regions`]): a leader declares
    /// those the cluster does not know yet ([`Op::DeclareRegions`]).
    pub regions: std::collections::BTreeSet<String>,
}

impl std::fmt::Debug for Housekeeping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Housekeeping")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The rounds' own client: a random id per process, one command at a time.
struct Rounds {
    parts: Housekeeping,
    client: u64,
    seq: u64,
    last_handoff: Option<tokio::time::Instant>,
}

impl Housekeeping {
    /// Starts the rounds on this member, owned by `tasks`; they act only
    /// while it leads.
    pub fn start(self, tasks: &GroupTasks) {
        let mut rounds = Rounds {
            parts: self,
            client: rand::random(),
            seq: 0,
            last_handoff: None,
        };
        tasks.spawn("housekeeping", Lifetime::Group, async move {
            let mut ticks = tokio::time::interval(rounds.parts.settings.every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if rounds.parts.raft.metrics().borrow().state == ServerState::Leader {
                    rounds.round().await;
                }
            }
        });
    }
}

impl Rounds {
    async fn round(&mut self) {
        self.hand_off_to_preferred().await;
        let Ok(cluster) = self.parts.state_machine.wire_version() else {
            return;
        };
        let members: Vec<_> = {
            let m = self.parts.raft.metrics();
            let m = m.borrow();
            m.membership_config
                .membership()
                .nodes()
                .map(|(id, _)| *id)
                .collect()
        };
        match self.parts.versions.agreed(members) {
            Some(agreed) if agreed > cluster => {
                tracing::info!(
                    from = cluster,
                    to = agreed,
                    "moving the cluster's wire version"
                );
                self.propose(Op::RaiseWireVersion { version: agreed }).await;
                return;
            }
            Some(agreed) if agreed < cluster => {
                let behind: Vec<_> = self
                    .parts
                    .versions
                    .members()
                    .into_iter()
                    .filter(|(_, v)| *v < cluster)
                    .collect();
                tracing::error!(
                    cluster,
                    ?behind,
                    "members speak an older wire version than the cluster has moved to: they cannot decode the log; upgrade them"
                );
            }
            _ => {}
        }
        if cluster >= 6 {
            self.declare_regions().await;
        }
        if cluster >= 2
            && let Some(after) = self.parts.settings.forget_clients_after
        {
            let idle_ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
            let any = self
                .parts
                .state_machine
                .idle_clients(self.parts.clock.now(), idle_ms, 1)
                .is_ok_and(|idle| !idle.is_empty());
            if any {
                let op = Op::ForgetIdleClients {
                    idle_ms,
                    limit: FORGET_LIMIT,
                };
                if let Some(Reply::Count(n)) = self.propose(op).await {
                    tracing::info!(clients = n, idle_ms, "forgot idle clients' dedup entries");
                }
            }
        }
    }

    /// Asks the preferred member to campaign when it is a voter, holds
    /// every entry this leader has, and no hand-off was tried lately. It
    /// wins on its up-to-date log; writes in flight meanwhile are answered
    /// `ForwardToLeader` and retried by their clients.
    async fn hand_off_to_preferred(&mut self) {
        // Before reading where the tenants live: no read while a hand-off
        // may not be tried anyway.
        if self
            .last_handoff
            .is_some_and(|at| at.elapsed() < HANDOFF_EVERY)
        {
            return;
        }
        let Some(preferred) = self.preferred_leader() else {
            return;
        };
        let (node, caught_up) = {
            let m = self.parts.raft.metrics();
            let m = m.borrow();
            let membership = m.membership_config.membership();
            let is_voter = membership.voter_ids().any(|id| id == preferred);
            let matched = m
                .replication
                .as_ref()
                .and_then(|r| r.get(&preferred).copied().flatten())
                .map(|l| l.index);
            let caught_up = preferred != m.id && is_voter && matched == m.last_log_index;
            (membership.get_node(&preferred).cloned(), caught_up)
        };
        let (Some(node), true) = (node, caught_up) else {
            return;
        };
        self.last_handoff = Some(tokio::time::Instant::now());
        let asked = self
            .parts
            .network
            .ask_to_campaign(preferred, &node, Duration::from_secs(2))
            .await;
        match asked {
            Ok(true) => tracing::info!(to = preferred, "handing the lead to the preferred member"),
            Ok(false) => tracing::warn!(
                to = preferred,
                "the preferred member declined the lead: its clock disagrees with the cluster's"
            ),
            Err(e) => tracing::debug!(to = preferred, error = %e, "could not hand the lead over"),
        }
    }

    /// The member that should lead: the configured one, or, for a home
    /// region's group, the first voter of the region where most of its
    /// tenants live now (their home region while it has none).
    fn preferred_leader(&self) -> Option<NodeId> {
        let Some(follow) = &self.parts.settings.follow_tenants else {
            return self.parts.settings.preferred_leader;
        };
        let region = match Residence::read(&self.parts.state_machine) {
            Ok(Some(residence)) => residence.home,
            Ok(None) => follow.home.clone(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read where the group's tenants live");
                return None;
            }
        };
        let m = self.parts.raft.metrics();
        let m = m.borrow();
        follow
            .wan
            .member_in(&region, m.id, m.membership_config.membership().voter_ids())
    }

    /// Declares the configured regions the cluster does not know yet; a
    /// round with nothing new proposes nothing.
    async fn declare_regions(&mut self) {
        let Ok(known) = self.parts.state_machine.known_regions() else {
            return;
        };
        let regions: Vec<String> = self.parts.regions.difference(&known).cloned().collect();
        if regions.is_empty() {
            return;
        }
        tracing::info!(?regions, "declaring the cluster's regions");
        self.propose(Op::DeclareRegions { regions }).await;
    }

    async fn propose(&mut self, op: Op) -> Option<Reply> {
        self.seq += 1;
        let request = ClientRequest {
            client: self.client,
            seq: self.seq,
            // Each command is awaited before the next: everything below
            // this one has its answer.
            acked_below: self.seq,
            now: 0,
            op,
        };
        match self.parts.group_commit.submit(request).await {
            WriteAnswer::Done(reply) => Some(reply),
            other => {
                tracing::debug!(answer = ?other, "housekeeping command not applied");
                None
            }
        }
    }
}
