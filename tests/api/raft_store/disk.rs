//! Storage faults on a member of a real `once store` cluster: its disk
//! fills under the Raft log (every commit fails with `ENOSPC`, as `write`
//! or `fsync` return it; `ONCE_STORE_DISK_FULL_AFTER`, failpoints builds).
//! The member says so, acknowledges nothing more and exits non-zero; the
//! others go on committing; restarted on a disk with room, it rebuilds
//! from its own log and its peers, and every acknowledged claim is on every
//! member.

#![cfg(feature = "failpoints")]

use std::collections::BTreeSet;
use std::time::Duration;

use once_store_client::client::ClientOptions;
use once_store_client::command::Reply;

use super::cluster::Cluster;
use super::{assert_members_agree, claim};

/// Claims `keys` one after another; returns the ones acknowledged (a claim
/// whose answer was lost is asked again: `Existing` acknowledges it too).
async fn claim_all(cluster: &Cluster, keys: impl Iterator<Item = String>) -> BTreeSet<String> {
    let client = cluster.client(ClientOptions::default());
    let mut acknowledged = BTreeSet::new();
    for key in keys {
        for _ in 0..3 {
            match client.claim(claim(&key, &format!("o-{key}"), "fp")).await {
                Ok(Reply::Claimed(_) | Reply::Existing(_)) => {
                    acknowledged.insert(key.clone());
                    break;
                }
                Ok(other) => panic!("claim of {key}: {other:?}"),
                // Its leader died under it: asked again.
                Err(_) => continue,
            }
        }
    }
    acknowledged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_disk_fills_stops_loudly_acknowledges_nothing_more_and_rebuilds_on_restart()
{
    let mut cluster = Cluster::start(3).await;
    let mut acknowledged = claim_all(&cluster, (0..10).map(|n| format!("before-{n}"))).await;
    assert_eq!(acknowledged.len(), 10);
    cluster.wait_for_convergence(&cluster.ids()).await;

    // Member 3 comes back from a SIGKILL on a disk with room for ten more
    // log commits.
    cluster.kill(3).await;
    cluster.set_env(
        3,
        vec![("ONCE_STORE_DISK_FULL_AFTER".into(), "10".into())],
        None,
    );
    let log = tempfile::NamedTempFile::new().unwrap();
    cluster.spawn_logging_to(3, None, log.path()).await;
    acknowledged.extend(claim_all(&cluster, (0..60).map(|n| format!("during-{n}"))).await);
    // Two members of three hold a quorum: every claim was acknowledged.
    assert_eq!(acknowledged.len(), 70);

    let exit = cluster
        .process(3)
        .expect("member 3 running")
        .exit_within(Duration::from_secs(60))
        .await;
    assert!(!exit.success(), "the member exits non-zero: {exit:?}");
    let said = std::fs::read_to_string(log.path()).unwrap();
    assert!(
        said.contains("raft log commit failed") && said.contains("No space left on device"),
        "the member says why it stops:\n{said}"
    );
    assert!(
        said.contains("a Raft core stopped; stopping this member"),
        "{said}"
    );

    // The others lead on without it.
    cluster.wait_for_leader(&[1, 2]).await;
    acknowledged.extend(claim_all(&cluster, (0..5).map(|n| format!("after-{n}"))).await);
    assert_eq!(acknowledged.len(), 75);

    // Restarted with room on its disk: it catches up, and holds exactly what
    // the others hold — every acknowledged claim, nothing else.
    cluster.set_env(3, vec![], None);
    cluster.spawn(3, None).await;
    cluster.wait_for_convergence(&cluster.ids()).await;
    let records = assert_members_agree(&cluster).await;
    let held: BTreeSet<String> = records.iter().map(|r| r.scope.key.clone()).collect();
    assert_eq!(held, acknowledged);
}
