//! Region health checks and automatic failover.
//!
//! Every `--health-check-interval` the router asks every node of every
//! region for `/readyz` (an answer counts if it comes within the interval;
//! a later one still finishes, so its connection is kept for the next
//! round). A round fails for a region
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
//! Failed rounds make a region down only on evidence that survives a
//! loaded machine ([`crate::regions`],
//! docs/decisions/0085-a-region-is-down-on-evidence-that-survives-load.md):
//! every node refusing the connection, the cut above, or raft-store's
//! word that the region's member is gone ([`crate::store_view`]); checks
//! that merely timed out are withheld (`router_region_down_withheld_total`)
//! until they have failed for `unconfirmed_after`, and a check answered
//! ready after its round ends the streak. Every declaration is counted by
//! its evidence in `router_region_down_declarations_total`.
//!
//! A node that answers `503` waiting only on raft-store, the store every
//! region shares ([`once_edge::ops::WAITING_ON_HEADER`]), fails its region's
//! round only if another region was ready that round and reaches the
//! leaders of the groups it waits on: then the region is cut off from the
//! store and its tenants are better served elsewhere. When no ready region
//! reaches them, the store is what failed (an election after its leader's
//! region died, or in one region's group): the waiting regions pass the
//! round, stay eligible standbys, and the failover of the region that died
//! waits in its write for the new leader instead of for every region to
//! come back and settle
//! (docs/decisions/0056-a-shared-store-outage-is-no-regions-failure.md,
//! docs/decisions/0065-a-groups-election-is-no-regions-failure.md). A node
//! that does not name its groups counts as reaching, or waiting on, the
//! whole store.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::future::join_all;
use once_edge::ops::StoreGroups;
use once_store_client::command::RegionStatus;
use tokio::time::MissedTickBehavior;

use crate::failover::{Trigger, now_ms};
use crate::metrics::{DownLabels, Metrics};
use crate::regions::{Evidence, Round, Verdict};
use crate::state::{RouterState, SharedState};

/// How long a health check's request may go on after its round judged it
/// failed (the round waits one interval). A connection still being opened
/// — a mutual-TLS handshake on a loaded machine can take a second — is
/// finished and kept for the next round instead of being dropped with this
/// one, which left every later round to open a new one within its 200 ms
/// and fail too (RELIABILITY.md, finding 20). The client's connect timeout
/// (1 s) fits within it; a node that takes connections but never answers
/// (paused) holds at most this long over rounds' worth of checks.
const CHECK_LIMIT: Duration = Duration::from_secs(2);

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
pub async fn check_once(state: &SharedState) {
    let started = Instant::now();
    let regions: Vec<String> = state.config.nodes.regions().map(str::to_owned).collect();
    let answers = join_all(regions.iter().map(|r| region_answers(state, r, started))).await;
    let reach = Reach::of_ready(&answers);
    let mut went_down = Vec::new();
    for (region, answer) in regions.iter().zip(answers) {
        let cut_off = match &answer {
            Answer::WaitingOnStore(waits) => reach.covers(waits.as_ref()),
            _ => false,
        };
        let round = match answer {
            Answer::Ready(_) => Round::Passed,
            Answer::WaitingOnStore(_) if !cut_off => Round::Passed,
            // Its nodes say they cannot reach what other regions reach:
            // under load, as often a node's stale word of the store as a
            // region cut off from it (RELIABILITY.md, finding 20); the
            // store's view decides.
            Answer::WaitingOnStore(_) => Round::Failed(None),
            Answer::Failed(failure) => Round::Failed(failure.evidence()),
        };
        let (verdict, failures) = state.health.record(region, started, round, |since| {
            state.store_view.lost(region, since)
        });
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
            Verdict::Withheld => {
                tracing::warn!(
                    region,
                    failures,
                    last_round = ?answer,
                    cut_off,
                    at_ms = now_ms(),
                    "region not declared down: its checks failed, but nothing says it is gone (no refusal, raft-store still hears its member)"
                );
                state
                    .metrics
                    .region_down_withheld
                    .get_or_create(&labels)
                    .inc();
            }
            Verdict::WentDown(evidence) => {
                tracing::warn!(
                    region,
                    failures,
                    last_round = ?answer,
                    cut_off,
                    evidence = evidence.as_str(),
                    at_ms = now_ms(),
                    "region down: every node failed its health checks"
                );
                state.metrics.region_failovers.get_or_create(&labels).inc();
                state
                    .metrics
                    .region_down_declarations
                    .get_or_create(&DownLabels {
                        region: region.clone(),
                        evidence: evidence.as_str().to_owned(),
                    })
                    .inc();
                // Published after the tenants moved: the status is
                // advisory, the move is what clients wait for.
                went_down.push(region.clone());
            }
            Verdict::CameBack => {
                state.unsettled.forget_region(region);
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
        // placement written since), or a write whose outcome is unknown
        // is to be sent again (finding 21).
        if !went_down.contains(&region)
            && state.placements.homed_in(&region).is_empty()
            && !state.unsettled.holds(&region)
        {
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
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// Some node is ready: the store's groups the ready nodes reach
    /// (`None`: some node did not say, as on a SQL store).
    Ready(Option<Groups>),
    /// None is, and some node waits only on the shared store: the groups
    /// the waiting nodes wait on (`None`: some node did not name them).
    WaitingOnStore(Option<Groups>),
    /// No node answered in time, or none could serve for a reason of its own.
    Failed(Failure),
}

/// How a region's nodes failed a round, surest last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Failure {
    /// Some node gave no answer in time: busy, paused or gone, it cannot
    /// tell.
    Silent,
    /// Every node answered, `503` (or another failure) for a reason of
    /// its own, or refused, some of each.
    NotReady,
    /// Every node refused the connection: nothing listens.
    Refused,
    /// The region is cut off from this router (`/admin/partition`).
    Cut,
}

impl Failure {
    /// What the failure is evidence of, when it is sure.
    fn evidence(self) -> Option<Evidence> {
        match self {
            Self::Silent => None,
            // A node's own `503` may be its load shedder or a readiness
            // check that timed out on a busy machine: not sure either.
            Self::NotReady => None,
            Self::Refused => Some(Evidence::NothingListens),
            Self::Cut => Some(Evidence::CutOff),
        }
    }

    /// Two nodes' failures as the region's: the least sure wins, so one
    /// silent node leaves the round unsure.
    fn with(self, other: Self) -> Self {
        self.min(other)
    }
}

/// Whether `e` is a refused connection: nothing listens at the address (a
/// connect timeout, or a handshake cut short, may be a busy machine).
fn is_refused(e: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = err.source();
    }
    false
}

type Groups = BTreeSet<String>;

/// What the regions that are ready this round reach of the shared store.
#[derive(Debug, PartialEq, Eq)]
enum Reach {
    /// No region is ready.
    Nothing,
    /// These groups' leaders.
    Groups(Groups),
    /// Some ready node did not say: the whole store, as before groups.
    Everything,
}

impl Reach {
    fn of_ready(answers: &[Answer]) -> Self {
        let mut reach = Reach::Nothing;
        for answer in answers {
            reach = match (reach, answer) {
                (reach, Answer::WaitingOnStore(_) | Answer::Failed(_)) => reach,
                (Reach::Everything, _) | (_, Answer::Ready(None)) => Reach::Everything,
                (Reach::Nothing, Answer::Ready(Some(groups))) => Reach::Groups(groups.clone()),
                (Reach::Groups(mut all), Answer::Ready(Some(groups))) => {
                    all.extend(groups.iter().cloned());
                    Reach::Groups(all)
                }
            };
        }
        reach
    }

    /// Whether a region waiting on `waits` (`None`: the store as a whole)
    /// is cut off from what the ready regions reach — then its tenants are
    /// better served elsewhere — rather than waiting on groups that have no
    /// leader in reach of anyone, which no failover cures (decisions 0056,
    /// 0065).
    fn covers(&self, waits: Option<&Groups>) -> bool {
        match (self, waits) {
            (Reach::Nothing, _) => false,
            (Reach::Everything, _) | (Reach::Groups(_), None) => true,
            (Reach::Groups(reached), Some(waits)) => waits.is_subset(reached),
        }
    }
}

/// The best of what `region`'s nodes answer `/readyz` in time: ready
/// nodes' groups together; else waiting nodes' groups together.
async fn region_answers(state: &SharedState, region: &str, started: Instant) -> Answer {
    if !state.partition.reachable(region) {
        return Answer::Failed(Failure::Cut);
    }
    let timeout = state.config.health.interval;
    let checks = state.config.nodes.urls(region).iter().map(|url| {
        let request = state
            .control_http
            .get(format!("{url}/readyz"))
            .header(
                once_edge::ops::ANSWER_WITHIN_HEADER,
                timeout.as_millis().to_string(),
            )
            .timeout(CHECK_LIMIT)
            .send();
        // Its own task: the check may outlive the round that judges it.
        let (late, region_name) = (state.clone(), region.to_owned());
        let check = tokio::spawn(async move {
            let response = request.await?;
            let (status, headers) = (response.status(), response.headers().clone());
            // Read to its end, so the connection goes back to the pool.
            response.bytes().await?;
            if status.is_success() && started.elapsed() >= timeout {
                // Ready, after its round judged it: the node is busy, not
                // gone (decision 0085).
                late.health.answered_late(&region_name);
            }
            Ok::<_, reqwest::Error>((status, headers))
        });
        async move {
            let Ok(Ok(answer)) = tokio::time::timeout(timeout, check).await else {
                // Not in time (or the task panicked): a failed check; the
                // request goes on, and its connection is kept.
                return Answer::Failed(Failure::Silent);
            };
            // Any answer means the node takes connections: requests stop
            // failing fast for it ([`crate::reachability`]).
            state.reachability.record(url, &answer);
            match answer {
                Ok((status, headers)) if status.is_success() => {
                    Answer::Ready(StoreGroups::in_reach_of(&headers))
                }
                Ok((status, headers)) if waits_on_store(status, &headers) => {
                    Answer::WaitingOnStore(StoreGroups::waiting_on_of(&headers))
                }
                Ok(_) => Answer::Failed(Failure::NotReady),
                Err(e) if is_refused(&e) => Answer::Failed(Failure::Refused),
                Err(e) if e.is_timeout() => Answer::Failed(Failure::Silent),
                // A handshake cut short, a reset: the node may be busy.
                Err(_) => Answer::Failed(Failure::Silent),
            }
        }
    });
    best_of(join_all(checks).await)
}

/// One answer for a region from its nodes' answers.
fn best_of(answers: Vec<Answer>) -> Answer {
    // No node at all: nothing listens for the region.
    let mut best = Answer::Failed(Failure::Refused);
    for answer in answers {
        best = match (best, answer) {
            (Answer::Ready(a), Answer::Ready(b)) => Answer::Ready(union(a, b)),
            (Answer::Ready(a), _) | (_, Answer::Ready(a)) => Answer::Ready(a),
            (Answer::WaitingOnStore(a), Answer::WaitingOnStore(b)) => {
                Answer::WaitingOnStore(union(a, b))
            }
            (Answer::WaitingOnStore(a), Answer::Failed(_))
            | (Answer::Failed(_), Answer::WaitingOnStore(a)) => Answer::WaitingOnStore(a),
            (Answer::Failed(a), Answer::Failed(b)) => Answer::Failed(a.with(b)),
        };
    }
    best
}

/// Two nodes' groups together; `None` (did not say) wins.
fn union(a: Option<Groups>, b: Option<Groups>) -> Option<Groups> {
    let (mut a, b) = (a?, b?);
    a.extend(b);
    Some(a)
}

fn waits_on_store(status: reqwest::StatusCode, headers: &reqwest::header::HeaderMap) -> bool {
    status == reqwest::StatusCode::SERVICE_UNAVAILABLE
        && headers
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

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(names: &[&str]) -> Option<Groups> {
        Some(names.iter().map(|n| (*n).to_owned()).collect())
    }

    #[test]
    fn a_region_waiting_on_a_group_no_ready_region_reaches_is_not_cut_off() {
        // us waits on its own group while eu, ready, does not reach it
        // either: that group has no leader in reach of anyone.
        let answers = [
            Answer::Ready(groups(&["directory", "ap"])),
            Answer::WaitingOnStore(groups(&["us"])),
        ];
        let reach = Reach::of_ready(&answers);
        assert!(!reach.covers(groups(&["us"]).as_ref()));
        // Once a ready region reaches it, us is the one cut off.
        let reach = Reach::of_ready(&[Answer::Ready(groups(&["directory", "us"]))]);
        assert!(reach.covers(groups(&["us"]).as_ref()));
        assert!(
            !reach.covers(groups(&["us", "ap"]).as_ref()),
            "ap has no leader"
        );
        // What the ready regions reach, together.
        let reach = Reach::of_ready(&[
            Answer::Ready(groups(&["directory"])),
            Answer::Ready(groups(&["ap"])),
            Answer::Failed(Failure::Silent),
        ]);
        assert!(reach.covers(groups(&["directory", "ap"]).as_ref()));
    }

    #[test]
    fn nodes_that_do_not_name_groups_are_judged_as_before_groups() {
        // No region ready: the store is out, nobody is cut off (0056).
        let reach = Reach::of_ready(&[
            Answer::WaitingOnStore(None),
            Answer::Failed(Failure::Silent),
        ]);
        assert_eq!(reach, Reach::Nothing);
        assert!(!reach.covers(None));
        assert!(!reach.covers(groups(&["us"]).as_ref()));
        // A ready node that does not say reaches the whole store.
        let reach = Reach::of_ready(&[Answer::Ready(groups(&["directory"])), Answer::Ready(None)]);
        assert_eq!(reach, Reach::Everything);
        assert!(reach.covers(groups(&["us"]).as_ref()));
        // A waiting node that does not say waits on the whole store, which
        // some region reaches.
        let reach = Reach::of_ready(&[Answer::Ready(groups(&["directory"]))]);
        assert!(reach.covers(None));
    }

    #[test]
    fn a_regions_answer_is_its_best_nodes_with_their_groups_together() {
        assert_eq!(
            best_of(vec![
                Answer::Failed(Failure::Silent),
                Answer::WaitingOnStore(groups(&["us"])),
                Answer::Ready(groups(&["directory"])),
                Answer::Ready(groups(&["us"])),
            ]),
            Answer::Ready(groups(&["directory", "us"]))
        );
        assert_eq!(
            best_of(vec![
                Answer::WaitingOnStore(groups(&["us"])),
                Answer::Failed(Failure::Silent),
                Answer::WaitingOnStore(groups(&["directory"])),
            ]),
            Answer::WaitingOnStore(groups(&["directory", "us"]))
        );
        assert_eq!(
            best_of(vec![
                Answer::WaitingOnStore(groups(&["us"])),
                Answer::WaitingOnStore(None),
            ]),
            Answer::WaitingOnStore(None)
        );
        assert_eq!(best_of(vec![]), Answer::Failed(Failure::Refused));
    }

    #[test]
    fn a_regions_failure_is_sure_only_when_every_node_refused() {
        let failed =
            |failures: &[Failure]| best_of(failures.iter().map(|f| Answer::Failed(*f)).collect());
        assert_eq!(
            failed(&[Failure::Refused, Failure::Refused]),
            Answer::Failed(Failure::Refused)
        );
        assert_eq!(Failure::Refused.evidence(), Some(Evidence::NothingListens));
        // One node silent (busy, paused or gone): the round is not sure.
        assert_eq!(
            failed(&[Failure::Refused, Failure::Silent]),
            Answer::Failed(Failure::Silent)
        );
        assert_eq!(
            failed(&[Failure::NotReady, Failure::Refused]),
            Answer::Failed(Failure::NotReady)
        );
        assert_eq!(Failure::Silent.evidence(), None);
        assert_eq!(Failure::NotReady.evidence(), None);
        assert_eq!(Failure::Cut.evidence(), Some(Evidence::CutOff));
    }
}
