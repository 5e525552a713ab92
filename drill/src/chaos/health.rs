//! When the cluster counts as healthy again after a fault: every process
//! `cluster.json` names is alive, every node and the router answer
//! `/readyz` on their admin listeners, and raft-store has a leader whose voters are every region's
//! member, each within a few entries of the leader. The next fault waits
//! for it, so faults follow one another instead of piling up into an
//! outage no deployment survives (two of three store members down).

use std::time::Duration;

use tokio::time::Instant;

use crate::chaos::context::Ctx;
use crate::chaos::processes::{self, ProcState};

/// A follower this many entries behind the leader counts as caught up.
const CAUGHT_UP_ENTRIES: u64 = 500;

/// Polls until healthy or `limit`; answers how long it took, or why it is
/// not healthy.
pub async fn wait_healthy(ctx: &Ctx, limit: Duration) -> Result<Duration, String> {
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        match unhealthy(ctx).await {
            None => return Ok(start.elapsed()),
            Some(why) if start.elapsed() >= limit => {
                return Err(format!("not healthy after {limit:?}: {why}"));
            }
            Some(_) => {}
        }
    }
}

/// Why the cluster is not healthy now (`None`: it is).
async fn unhealthy(ctx: &Ctx) -> Option<String> {
    let cluster = match ctx.cluster() {
        Ok(c) => c,
        Err(e) => return Some(format!("{e:#}")),
    };
    let mut pids = vec![("router".to_owned(), cluster.router.pid)];
    for region in &cluster.regions {
        pids.push((format!("node-{}", region.name), region.node.pid));
        pids.push((
            format!("store-{}", region.name),
            region.store.as_ref().and_then(|s| s.pid),
        ));
    }
    for (name, pid) in pids {
        if let Some(pid) = pid {
            let state = processes::state(pid);
            if !matches!(state, ProcState::Alive(_)) {
                return Some(format!("{name} pid {pid}: {state}"));
            }
        }
    }
    // Asked where Kubernetes asks (the manifests' readinessProbe): the
    // admin listener. Whether the public one keeps up under a fault is
    // what the clients' attempts measure.
    let ready = std::iter::once(cluster.router.admin().to_owned())
        .chain(cluster.regions.iter().map(|r| r.node.admin().to_owned()));
    for url in ready {
        let url = format!("{}/readyz", url.trim_end_matches('/'));
        match ctx.http.get(&url).send().await {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => return Some(format!("{url}: {}", r.status())),
            Err(e) => return Some(format!("{url}: {e}")),
        }
    }
    let (leader, followers) = match ctx.leader_and_followers().await {
        Ok(lf) => lf,
        Err(e) => return Some(format!("{e:#}")),
    };
    let members = cluster.regions.iter().filter(|r| r.store.is_some()).count();
    if leader.status.voters.len() != members {
        return Some(format!(
            "{} voters of {members} members",
            leader.status.voters.len()
        ));
    }
    if followers.len() + 1 != members {
        return Some(format!(
            "{} of {members} members answer",
            followers.len() + 1
        ));
    }
    for (id, lag) in &leader.status.follower_lag {
        match lag {
            Some(lag) if *lag <= CAUGHT_UP_ENTRIES => {}
            other => return Some(format!("member {id} lags the leader: {other:?}")),
        }
    }
    None
}
