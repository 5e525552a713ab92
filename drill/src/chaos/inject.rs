//! Applying each fault and healing it, seeing both happen. Every step that
//! can fail is recorded in the fault's [`FaultRecord`] and the fault goes
//! on to heal whatever it did apply: a chaos run never leaves a process
//! stopped, a link cut or a member out of the cluster behind it.
//!
//! | nemesis | applied | seen | healed |
//! |---|---|---|---|
//! | kill | SIGKILL the pid(s) | state `Z` or gone | `once up` restarts the region's dead processes; new pids alive |
//! | pause | SIGSTOP | state `T` | SIGCONT, seen running |
//! | partition | the switches of [`partitions`] | each probe refused with `503` | switches healed (halfway first, maybe), probes served |
//! | skew | graceful restart under libfaketime | the `Date` header's offset | graceful restart on the true clock, offset ≈ 0 |
//! | restart | every store member, node and the router restarted gracefully, one at a time, each waited for | new pid alive, old one gone | — |
//! | membership | a follower removed, wiped, added back (after a snapshot), voter again | voters without it; it answers blank; it holds a snapshot; voters with it | made a voter again if a step failed |
//! | leader | election asked of a follower, which is SIGKILLed mid-way | it is dead; the term moved | its region restarted |

use anyhow::Context;
use std::time::Duration;

use once_store_client::admin;
use tokio::time::Instant;

use crate::chaos::context::Ctx;
use crate::chaos::health;
use crate::chaos::nemesis::{Fault, Healing, KillTarget, ProcessRef, Role};
use crate::chaos::partitions;
use crate::chaos::processes::{self, ProcState};
use crate::chaos::record::FaultRecord;
use crate::client_log::now_ms;
use crate::control::{RestartOptions, Stop};

/// The most a clock read back may differ from the offset asked for: the
/// `Date` header has a resolution of one second, and the read takes time.
const CLOCK_TOLERANCE_SECONDS: i64 = 5;

/// How long a rolling restart waits for the cluster to be healthy again
/// before the next process, as a rollout waits for readiness.
const ROLLOUT_READY_LIMIT: Duration = Duration::from_secs(60);
/// How long healing asks again for a group's leader (and its membership
/// change) before it gives up: under load a group can be without one for
/// seconds, and a member not made a voter again stays out for the rest of
/// the run (RELIABILITY.md, finding 18).
const HEALING_LEADER_WAIT: Duration = Duration::from_secs(60);

/// What a fault left to heal.
#[derive(Debug, Default)]
pub struct Applied {
    /// Regions whose processes were killed and must be started again.
    restart_regions: Vec<String>,
    /// A stopped pid to continue.
    paused: Option<i32>,
    /// The partition's switches that were cut.
    partition: Option<partitions::Plan>,
    /// The process restarted with a skewed clock.
    skewed: Option<ProcessRef>,
    /// A store member taken out of the voters: (id, raft address, region).
    removed_member: Option<(u64, String, String)>,
}

/// Applies `fault`; what it says to heal goes to [`heal`].
pub async fn apply(ctx: &Ctx, fault: &Fault, record: &mut FaultRecord) -> Applied {
    let mut applied = Applied::default();
    match fault {
        Fault::Kill { target } => kill(ctx, target, record, &mut applied).await,
        Fault::Pause { process } => {
            if let Some(pid) = record.check(ctx.pid(process)) {
                record.did(format!("SIGSTOP {} (pid {pid})", process.name()));
                if let Some(state) = record.check(processes::stop_seen(pid).await) {
                    record.saw(format!("{} pid {pid}: {state}", process.name()));
                    record.took_effect = true;
                }
                // Continued on heal even if the state was not seen.
                applied.paused = Some(pid);
            }
        }
        Fault::Partition { shape, .. } => {
            let cluster = ctx.cluster();
            let plan = cluster.and_then(|c| partitions::plan(shape, &c, &ctx.http));
            if let Some(plan) = record.check(plan) {
                match partitions::cut(&plan).await {
                    Ok(done) => {
                        done.into_iter().for_each(|d| record.did(d));
                        record.took_effect = see_partition(ctx, &plan, true, record).await;
                        applied.partition = Some(plan);
                    }
                    Err((done, e)) => {
                        done.into_iter().for_each(|d| record.did(d));
                        record.failed(e);
                    }
                }
            }
        }
        Fault::Skew {
            process,
            offset_seconds,
        } => {
            applied.skewed = Some(process.clone());
            record.took_effect = restart_with_clock(ctx, process, *offset_seconds, record).await;
        }
        Fault::Restart => rolling_restart(ctx, record).await,
        Fault::Membership { pick } => membership(ctx, *pick, record, &mut applied).await,
        Fault::Leader {
            pick,
            kill_after_ms,
        } => leader(ctx, *pick, *kill_after_ms, record, &mut applied).await,
    }
    applied
}

/// Heals what [`apply`] left.
pub async fn heal(ctx: &Ctx, fault: &Fault, applied: Applied, record: &mut FaultRecord) {
    if let Some(pid) = applied.paused {
        record.did(format!("SIGCONT pid {pid}"));
        if let Some(state) = record.check(processes::continue_seen(pid).await) {
            record.saw(format!("pid {pid}: {state}"));
        }
    }
    if let Some(plan) = applied.partition {
        let mut rest = plan.switches.as_slice();
        if let Fault::Partition {
            healing: Healing::Halfway { after_ms },
            ..
        } = fault
        {
            let half = rest.len().div_ceil(2).min(rest.len().saturating_sub(1));
            let (first, second) = rest.split_at(half);
            let (done, failed) = partitions::heal(first).await;
            done.into_iter().for_each(|d| record.did(d));
            failed.into_iter().for_each(|f| record.failed(f));
            record.saw(format!(
                "partition half healed: {} of {} switches",
                first.len(),
                plan.switches.len()
            ));
            // The partial partition lasts as planned.
            tokio::time::sleep(Duration::from_millis(*after_ms)).await;
            rest = second;
        }
        let (done, failed) = partitions::heal(rest).await;
        done.into_iter().for_each(|d| record.did(d));
        failed.into_iter().for_each(|f| record.failed(f));
        see_partition(ctx, &plan, false, record).await;
    }
    if let Some(process) = applied.skewed {
        restart_with_clock(ctx, &process, 0, record).await;
    }
    if let Some((id, raft_addr, region)) = applied.removed_member {
        readd_member(ctx, id, &raft_addr, &region, record).await;
    }
    for region in applied.restart_regions {
        restart_region(ctx, &region, record).await;
    }
    record.healed_at = Some(now_ms());
}

/// Probes every member of the partition: all refused (`cut`) or all served
/// (healed). Answers whether they were.
async fn see_partition(
    ctx: &Ctx,
    plan: &partitions::Plan,
    cut: bool,
    record: &mut FaultRecord,
) -> bool {
    let mut all = true;
    for probe in &plan.probes {
        match partitions::refused(&ctx.http, probe).await {
            Ok(refused) if refused == cut => record.saw(format!(
                "store-{} {} a client of {}{}",
                probe.member_region,
                if cut { "refuses" } else { "serves" },
                probe.refuses,
                if cut {
                    ": 503 X-Once-Partitioned"
                } else {
                    " again"
                }
            )),
            Ok(refused) => {
                all = false;
                record.failed(format!(
                    "store-{} {} a client of {} (expected the opposite)",
                    probe.member_region,
                    if refused { "still refuses" } else { "serves" },
                    probe.refuses
                ));
            }
            Err(e) => {
                all = false;
                record.failed(e);
            }
        }
    }
    all
}

async fn kill(ctx: &Ctx, target: &KillTarget, record: &mut FaultRecord, applied: &mut Applied) {
    let victims: Vec<ProcessRef> = match target {
        KillTarget::Process { process } => vec![process.clone()],
        KillTarget::Region { region } => vec![
            ProcessRef {
                role: Role::Node,
                region: region.clone(),
            },
            ProcessRef {
                role: Role::Store,
                region: region.clone(),
            },
        ],
        KillTarget::StoreLeader => match ctx.leader_and_followers().await {
            Ok((leader, _)) => {
                record.saw(format!(
                    "store leader: store-{} (term {})",
                    leader.region, leader.status.term
                ));
                vec![ProcessRef {
                    role: Role::Store,
                    region: leader.region,
                }]
            }
            Err(e) => {
                record.failed(e);
                Vec::new()
            }
        },
    };
    for victim in victims {
        let Some(pid) = record.check(ctx.pid(&victim)) else {
            continue;
        };
        record.did(format!("SIGKILL {} (pid {pid})", victim.name()));
        if let Some(state) = record.check(processes::kill_seen(pid).await) {
            record.saw(format!("{} pid {pid}: {state}", victim.name()));
            record.took_effect = true;
        }
        if !applied.restart_regions.contains(&victim.region) {
            applied.restart_regions.push(victim.region.clone());
        }
    }
}

/// Asks `once up` to start the region's dead processes; sees their new
/// pids alive.
async fn restart_region(ctx: &Ctx, region: &str, record: &mut FaultRecord) {
    record.did(format!("restart region {region}'s dead processes"));
    if record
        .check(ctx.control.restart_region(region).await)
        .is_none()
    {
        return;
    }
    for role in [Role::Node, Role::Store] {
        let process = ProcessRef {
            role,
            region: region.to_owned(),
        };
        if let Some(pid) = record.check(ctx.pid(&process)) {
            let state = processes::state(pid);
            if matches!(state, ProcState::Alive(_)) {
                record.saw(format!("{} pid {pid}: {state}", process.name()));
            } else {
                record.failed(format!(
                    "{} pid {pid} after restart: {state}",
                    process.name()
                ));
            }
        }
    }
}

/// Where a process says what time it is.
fn clock_url(ctx: &Ctx, process: &ProcessRef) -> anyhow::Result<String> {
    let cluster = ctx.cluster()?;
    let region = cluster.region(&process.region, &ctx.cluster_path)?;
    Ok(match process.role {
        Role::Node => format!("{}/healthz", region.node.url.trim_end_matches('/')),
        Role::Store => format!(
            "{}/healthz",
            region
                .store
                .as_ref()
                .map(|s| s.api_url.trim_end_matches('/').to_owned())
                .unwrap_or_default()
        ),
    })
}

/// Restarts `process` gracefully with its clock `offset_seconds` off and
/// reads the offset back; answers whether it matched.
async fn restart_with_clock(
    ctx: &Ctx,
    process: &ProcessRef,
    offset_seconds: i64,
    record: &mut FaultRecord,
) -> bool {
    record.did(format!(
        "restart {} gracefully with its clock {offset_seconds:+} s off",
        process.name()
    ));
    let options = RestartOptions {
        stop: Stop::Term,
        clock_offset_seconds: offset_seconds,
        wipe: false,
    };
    let Some(restarted) =
        record.check(ctx.control.restart_process(&process.name(), &options).await)
    else {
        return false;
    };
    record.saw(format!(
        "{}: pid {} → {} ({})",
        process.name(),
        restarted.previous_pid,
        restarted.pid,
        restarted.stopped
    ));
    let url = match record.check(clock_url(ctx, process)) {
        Some(url) => url,
        None => return false,
    };
    let Some(seen) = record.check(processes::clock_offset(&ctx.http, &url).await) else {
        return false;
    };
    record.saw(format!(
        "{} reports its clock {seen:+} s off (asked {offset_seconds:+} s)",
        process.name()
    ));
    if (seen - offset_seconds).abs() > CLOCK_TOLERANCE_SECONDS {
        record.failed(format!(
            "{} runs {seen:+} s off, not {offset_seconds:+} s",
            process.name()
        ));
        return false;
    }
    true
}

/// Every store member, then every node, region by region, then the
/// router: SIGTERM (the process drains), start, ready, and the cluster
/// healthy before the next one.
async fn rolling_restart(ctx: &Ctx, record: &mut FaultRecord) {
    let Some(cluster) = record.check(ctx.cluster()) else {
        return;
    };
    let mut processes: Vec<String> = Vec::new();
    for region in &cluster.regions {
        processes.push(format!("store-{}", region.name));
        processes.push(format!("node-{}", region.name));
    }
    processes.push("router".to_owned());
    let mut restarted_all = true;
    for process in processes {
        record.did(format!(
            "rollout: restart {process} (SIGTERM, drain, start, ready)"
        ));
        let options = RestartOptions {
            stop: Stop::Term,
            clock_offset_seconds: 0,
            wipe: false,
        };
        let Some(restarted) = record.check(ctx.control.restart_process(&process, &options).await)
        else {
            restarted_all = false;
            continue;
        };
        let old = processes::state(restarted.previous_pid as i32);
        let new = processes::state(restarted.pid as i32);
        record.saw(format!(
            "{process}: pid {} ({}, old: {old}) → {} ({new})",
            restarted.previous_pid, restarted.stopped, restarted.pid
        ));
        if !old.is_dead() || !matches!(new, ProcState::Alive(_)) {
            restarted_all = false;
        }
        if let Err(e) = health::wait_healthy(ctx, ROLLOUT_READY_LIMIT).await {
            record.failed(format!("after restarting {process}: {e}"));
        }
    }
    record.took_effect = restarted_all;
}

/// Takes a follower out of the voters, wipes it, has the leader snapshot,
/// and adds it back: it catches up from the snapshot.
async fn membership(ctx: &Ctx, pick: u32, record: &mut FaultRecord, applied: &mut Applied) {
    let Some((leader, followers)) = record.check(ctx.leader_and_followers().await) else {
        return;
    };
    if followers.is_empty() {
        record.failed("no follower answers: nothing to remove");
        return;
    }
    let member = followers[pick as usize % followers.len()].clone();
    let id = member.status.id;
    let raft_addr = member.status.raft_addr.clone();
    let voters: Vec<u64> = leader
        .status
        .voters
        .iter()
        .copied()
        .filter(|v| *v != id)
        .collect();
    let Some(urls) = record.check(ctx.admin_urls()) else {
        return;
    };
    record.did(format!(
        "change membership: voters {voters:?} (store-{} id {id} removed)",
        member.region
    ));
    if record
        .check(admin::change_membership(&ctx.operator, &urls, voters.clone()).await)
        .is_none()
    {
        return;
    }
    // Out of the directory: from here on, healing adds it back to every
    // group, however far the rest got (run 11 of RELIABILITY.md: a group
    // without a leader stopped the removal halfway, and the member stayed
    // out of the directory for the rest of the run).
    applied.removed_member = Some((id, raft_addr.clone(), member.region.clone()));
    // Every other group the member votes in: out of each too, before its
    // disk is wiped (a voter that lost its log and vote must never count).
    for group in ctx.store_groups().unwrap_or_default() {
        let urls = once_store_client::groups::group_endpoints(&urls, &group);
        let Some(voters) = record.check(group_voters(ctx, &urls).await) else {
            return;
        };
        let voters: Vec<u64> = voters.into_iter().filter(|v| *v != id).collect();
        record.did(format!(
            "group {group}: change membership: voters {voters:?}"
        ));
        if record
            .check(admin::change_membership(&ctx.operator, &urls, voters).await)
            .is_none()
        {
            return;
        }
    }
    if let Ok((now, _)) = ctx.leader_and_followers().await {
        record.saw(format!("voters now {:?}", now.status.voters));
    }
    let process = format!("store-{}", member.region);
    record.did(format!("stop {process}, wipe its data, start it blank"));
    let options = RestartOptions {
        stop: Stop::Term,
        clock_offset_seconds: 0,
        wipe: true,
    };
    if let Some(restarted) = record.check(ctx.control.restart_process(&process, &options).await) {
        record.saw(format!(
            "{process}: pid {} → {} wiped={}",
            restarted.previous_pid, restarted.pid, restarted.wiped
        ));
        if let Some(status) = record.check(ctx.operator.status(&member.admin_url).await) {
            record.saw(format!(
                "{process} blank: last log index {:?}, voters {:?}",
                status.last_log_index, status.voters
            ));
            record.took_effect = status.last_log_index.is_none() && restarted.wiped;
        }
    }
    if let Ok((leader, _)) = ctx.leader_and_followers().await {
        record.did(format!("snapshot on the leader store-{}", leader.region));
        record.check(admin::snapshot(&ctx.operator, &leader.admin_url).await);
    }
}

/// The voters of the group whose admin endpoints are `urls`, as its leader
/// (the member that says it leads at the highest term) says. Never a
/// follower's view: a member wiped and re-added as a learner answers
/// before its log holds the group's membership, and voters computed from
/// that would hand the group to the blank member alone.
async fn group_voters(ctx: &Ctx, urls: &[String]) -> anyhow::Result<Vec<u64>> {
    let mut leader: Option<once_store_client::protocol::Status> = None;
    for url in urls {
        if let Ok(status) = ctx.operator.status(url).await
            && status.leader == Some(status.id)
            && leader.as_ref().is_none_or(|l| status.term > l.term)
        {
            leader = Some(status);
        }
    }
    leader
        .map(|l| l.voters)
        .with_context(|| format!("no member of {urls:?} says it leads"))
}

/// `step` (a read of a group's leader, or a change it must make) asked
/// again every half second while it fails, for up to
/// [`HEALING_LEADER_WAIT`]: its last error if it never succeeds. Each step
/// is one that can be repeated (adding a learner twice, setting the same
/// voters twice).
async fn until_led<T, E, Fut>(mut step: impl FnMut() -> Fut) -> Result<T, E>
where
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + HEALING_LEADER_WAIT;
    loop {
        match step().await {
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            done => return done,
        }
    }
}

/// Adds the member back as a learner (the leader streams it a snapshot,
/// blocking until it caught up) and makes every member a voter again: in
/// every other group first, then in the directory.
async fn readd_member(ctx: &Ctx, id: u64, raft_addr: &str, region: &str, record: &mut FaultRecord) {
    let Some(urls) = record.check(ctx.admin_urls()) else {
        return;
    };
    for group in ctx.store_groups().unwrap_or_default() {
        let urls = once_store_client::groups::group_endpoints(&urls, &group);
        let addr = format!(
            "{raft_addr}{}",
            once_store_client::protocol::group_path(&group)
        );
        record.did(format!(
            "group {group}: add store-{region} (id {id}) back as a learner"
        ));
        record.check(until_led(|| admin::add_learner(&ctx.operator, &urls, id, &addr)).await);
        // A group that cannot be read even then is left as it is; the
        // directory and the other groups still get the member back.
        let Some(mut voters) = record.check(until_led(|| group_voters(ctx, &urls)).await) else {
            continue;
        };
        if !voters.contains(&id) {
            voters.push(id);
            voters.sort_unstable();
        }
        record.did(format!(
            "group {group}: change membership: voters {voters:?}"
        ));
        record.check(
            until_led(|| admin::change_membership(&ctx.operator, &urls, voters.clone())).await,
        );
    }
    record.did(format!("add store-{region} (id {id}) back as a learner"));
    record.check(until_led(|| admin::add_learner(&ctx.operator, &urls, id, raft_addr)).await);
    let Some((leader, _)) = record.check(until_led(|| ctx.leader_and_followers()).await) else {
        return;
    };
    let mut voters = leader.status.voters.clone();
    if !voters.contains(&id) {
        voters.push(id);
        voters.sort_unstable();
    }
    record.did(format!("change membership: voters {voters:?}"));
    record
        .check(until_led(|| admin::change_membership(&ctx.operator, &urls, voters.clone())).await);
    let admin_url = ctx
        .stores()
        .ok()
        .and_then(|s| s.into_iter().find(|(r, _)| r == region))
        .map(|(_, s)| s.admin().to_owned());
    let Some(url) = admin_url else {
        record.failed(format!(
            "region {region} has no store member in cluster.json"
        ));
        return;
    };
    match caught_up(
        &ctx.operator,
        &url,
        id,
        leader.status.committed_index.unwrap_or(0),
    )
    .await
    {
        Ok(status) => {
            record.saw(format!(
                "store-{region} a voter again and caught up: applied {:?} (leader had committed {:?}), snapshot index {:?}",
                status.applied_index, leader.status.committed_index, status.snapshot_index
            ));
            if status.snapshot_index.is_none() {
                // The leader still held its whole log (fewer entries than
                // it keeps after a snapshot): the member caught up from it.
                record.saw(format!(
                    "store-{region} caught up from the log, not a snapshot"
                ));
            }
        }
        Err(e) => record.failed(e),
    }
}

/// How long a re-added member may take to catch up.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(60);

/// Polls the member at `url` until it counts itself among the voters and
/// has applied at least `target`.
async fn caught_up(
    operator: &admin::Operator,
    url: &str,
    id: u64,
    target: u64,
) -> anyhow::Result<once_store_client::protocol::Status> {
    let deadline = Instant::now() + CATCH_UP_LIMIT;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let status = operator.status(url).await;
        if let Ok(status) = &status
            && status.voters.contains(&id)
            && status.applied_index.unwrap_or(0) >= target
        {
            return Ok(status.clone());
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "member {id} not caught up to {target} within {CATCH_UP_LIMIT:?}: {status:?}"
            );
        }
    }
}

/// Asks a follower to start an election and SIGKILLs it `kill_after_ms`
/// later, while it campaigns or just after it won.
async fn leader(
    ctx: &Ctx,
    pick: u32,
    kill_after_ms: u64,
    record: &mut FaultRecord,
    applied: &mut Applied,
) {
    let Some((leader, followers)) = record.check(ctx.leader_and_followers().await) else {
        return;
    };
    if followers.is_empty() {
        record.failed("no follower answers: no one to campaign");
        return;
    }
    let candidate = followers[pick as usize % followers.len()].clone();
    record.saw(format!(
        "leader store-{} at term {}",
        leader.region, leader.status.term
    ));
    let process = ProcessRef {
        role: Role::Store,
        region: candidate.region.clone(),
    };
    let Some(pid) = record.check(ctx.pid(&process)) else {
        return;
    };
    record.did(format!("election asked of store-{}", candidate.region));
    let asked = Instant::now();
    if record
        .check(admin::elect(&ctx.operator, &candidate.admin_url).await)
        .is_none()
    {
        return;
    }
    // The kill's moment is part of the drawn fault.
    tokio::time::sleep_until(asked + Duration::from_millis(kill_after_ms)).await;
    record.did(format!(
        "SIGKILL {} (pid {pid}) mid-election",
        process.name()
    ));
    if let Some(state) = record.check(processes::kill_seen(pid).await) {
        record.saw(format!("{} pid {pid}: {state}", process.name()));
        record.took_effect = true;
    }
    applied.restart_regions.push(candidate.region);
    if let Ok((now, _)) = ctx.leader_and_followers().await {
        record.saw(format!(
            "leader store-{} at term {} (was term {})",
            now.region, now.status.term, leader.status.term
        ));
    }
}
