//! A rolling upgrade of raft-store across a wire version
//! (docs/decisions/0041-wire-versions.md): one member still speaks the
//! version before, and the cluster serves on it without moving;
//! a node of the build before (no version header) is served by the new
//! members; once the last member restarts on the new version the leader
//! moves the cluster to it, and the command it brings — forgetting idle
//! clients' dedup entries — runs. With a real binary of the build before
//! (`ONCE_BUILD_BEFORE`), rolling that member back after the move is
//! refused at its start.

use std::path::PathBuf;
use std::time::Duration;

use once_store_client::client::ClientOptions;
use once_store_client::command::{ClientRequest, Op, Reply};
use once_store_client::protocol::{WRITE_PATH, WireStatus, WriteAnswer};
use once_store_client::wire::{self, VERSION_HEADER, WIRE_VERSION};
use once_tls::Role;

use super::cluster::{Cluster, MemberEnv};
use super::{assert_members_agree, claim};
use crate::helpers::eventually;

/// The member that is a step behind: by default this build declaring
/// version 1 (`ONCE_STORE_WIRE_VERSION`), as a member of the build before
/// declares itself. With `ONCE_BUILD_BEFORE=<path to a once binary of the
/// build before wire versions>` it runs that binary instead (by hand: a
/// second build in CI would double its compile time).
const BEHIND: u64 = 3;

fn build_before() -> Option<PathBuf> {
    std::env::var_os("ONCE_BUILD_BEFORE").map(PathBuf::from)
}

/// Every member forgets clients idle for an hour (an environment variable,
/// which a build before the flag ignores).
fn forget_after_an_hour() -> MemberEnv {
    vec![("ONCE_STORE_FORGET_CLIENTS_AFTER".into(), "1h".into())]
}

/// What a leader of this build says of wire versions once it has heard
/// every member. A member of the build before reports no wire versions, so
/// the lead is moved off it first.
async fn wire_once_all_heard(cluster: &Cluster) -> (u64, WireStatus) {
    let operator = cluster.operator();
    eventually(Duration::from_secs(60), || async {
        let leader = cluster.wait_for_leader(&cluster.ids()).await;
        if leader == BEHIND && build_before().is_some() {
            let other = cluster.members[&1].admin_endpoint();
            let _ = once_store_client::admin::elect(&operator, &other).await;
            return None;
        }
        let wire = cluster.status(leader).await?.wire;
        (wire.members.len() == cluster.ids().len()).then_some((leader, wire))
    })
    .await
}

/// A node of the build before: postcard to the write path, no version
/// header. Answers the member's declared version and its answer.
async fn write_as_old_node(
    cluster: &Cluster,
    member: u64,
    request: &ClientRequest,
) -> (Option<String>, reqwest::StatusCode, Option<WriteAnswer>) {
    let http = cluster.http_client_as("old-node", Role::Node);
    let response = http
        .post(format!(
            "https://{}{WRITE_PATH}",
            cluster.members[&member].endpoint()
        ))
        .header(reqwest::header::CONTENT_TYPE, wire::CONTENT_TYPE)
        .body(wire::encode(request).unwrap())
        .send()
        .await
        .expect("the member answers");
    let declared = response
        .headers()
        .get(VERSION_HEADER)
        .map(|v| v.to_str().unwrap().to_owned());
    let status = response.status();
    let body = response.bytes().await.unwrap();
    (declared, status, wire::decode(&body).ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_moves_the_cluster_to_a_new_wire_version_only_once_every_member_speaks_it()
 {
    let behind = |id| {
        let mut env = forget_after_an_hour();
        if id != BEHIND {
            return (env, None);
        }
        match build_before() {
            Some(binary) => (env, Some(binary)),
            None => {
                env.push(("ONCE_STORE_WIRE_VERSION".into(), "1".into()));
                (env, None)
            }
        }
    };
    let mut cluster = Cluster::start_running(3, &[], behind).await;
    let client = cluster.client(ClientOptions::default());
    assert!(matches!(
        client
            .claim(claim("before", "o-before", "fp"))
            .await
            .unwrap(),
        Reply::Claimed(_)
    ));

    // Mid-roll: every member heard, one on version 1, so the cluster
    // agrees on 1 and stays there.
    let (leader, wire) = wire_once_all_heard(&cluster).await;
    assert_eq!(wire.members[&BEHIND], 1, "{wire:?}");
    assert_eq!(wire.agreed, Some(1));
    cluster.wait_for_convergence(&cluster.ids()).await;
    for id in cluster.ids() {
        // A member of the build before reports no wire versions.
        if id == BEHIND && build_before().is_some() {
            continue;
        }
        let status = cluster.status(id).await.unwrap();
        assert_eq!(status.wire.cluster, 1, "member {id}");
    }

    // A node of the build before is served, and told the member's version.
    let old_node = ClientRequest {
        client: rand::random(),
        seq: 1,
        acked_below: 1,
        now: 0,
        op: Op::Claim(claim("old-node", "o-old-node", "fp")),
    };
    let (declared, status, answer) = write_as_old_node(&cluster, leader, &old_node).await;
    assert!(status.is_success(), "{status}");
    let speaks = if leader == BEHIND { 1 } else { WIRE_VERSION };
    assert_eq!(declared, Some(speaks.to_string()));
    assert!(
        matches!(answer, Some(WriteAnswer::Done(Reply::Claimed(_)))),
        "{answer:?}"
    );
    // A client's command of a version the cluster has not moved to is
    // refused, not proposed (decision 0055's evacuation, version 4).
    assert_eq!(
        client.evacuate_region("nowhere", &[]).await.unwrap(),
        Reply::NotAgreed {
            needs: 4,
            cluster: 1
        }
    );
    // Only the leader proposes the new commands: no node may.
    let forged = ClientRequest {
        seq: 2,
        acked_below: 2,
        op: Op::RaiseWireVersion { version: 2 },
        ..old_node.clone()
    };
    let (_, status, _) = write_as_old_node(&cluster, leader, &forged).await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN);

    // The last member restarts on the new version: the cluster moves.
    cluster.kill(BEHIND).await;
    cluster.set_env(BEHIND, forget_after_an_hour(), None);
    cluster.spawn(BEHIND, None).await;
    eventually(Duration::from_secs(30), || async {
        let mut moved = true;
        for id in cluster.ids() {
            moved &= cluster.status(id).await?.wire.cluster == WIRE_VERSION;
        }
        moved.then_some(())
    })
    .await;
    let (_, wire) = wire_once_all_heard(&cluster).await;
    assert_eq!(wire.agreed, Some(WIRE_VERSION), "{wire:?}");
    assert!(matches!(
        client.evacuate_region("nowhere", &[]).await.unwrap(),
        Reply::Evacuated { again: false, .. }
    ));
    assert!(matches!(
        client.claim(claim("after", "o-after", "fp")).await.unwrap(),
        Reply::Claimed(_)
    ));

    // The old node's command is still deduplicated ...
    let (_, _, again) = write_as_old_node(&cluster, leader_now(&cluster).await, &old_node).await;
    assert_eq!(again, answer);
    // ... until it has been idle past the limit: two hours on every
    // member's clock, and the leader forgets it.
    let operator = cluster.operator();
    for admin in cluster.admin_endpoints() {
        once_store_client::admin::advance_clock(&operator, &admin, 2 * 3_600_000)
            .await
            .expect("move a member's clock");
    }
    let rerun = eventually(Duration::from_secs(30), || async {
        let leader = leader_now(&cluster).await;
        let (_, _, answer) = write_as_old_node(&cluster, leader, &old_node).await;
        // Forgotten, the same (client, seq) runs again: the key is taken.
        matches!(answer, Some(WriteAnswer::Done(Reply::Existing(_)))).then_some(answer)
    })
    .await;
    assert!(rerun.is_some());
    cluster.wait_for_convergence(&cluster.ids()).await;
    let records = assert_members_agree(&cluster).await;
    assert_eq!(records.len(), 3, "before, old-node, after");

    // Rolled back below the cluster's version, a member of the build
    // before cannot read its own log: it stops at start, applying nothing
    // it does not know, and the other two carry on.
    if let Some(binary) = build_before() {
        cluster.kill(BEHIND).await;
        cluster.set_env(BEHIND, forget_after_an_hour(), Some(binary));
        let mut command = cluster.command(BEHIND, None);
        command.stderr(std::process::Stdio::piped());
        let ran = tokio::time::timeout(Duration::from_secs(60), command.output())
            .await
            .expect("the build before exits")
            .expect("the build before runs");
        let stderr = String::from_utf8_lossy(&ran.stderr);
        assert!(!ran.status.success(), "{stderr}");
        assert!(stderr.contains("Read Logs"), "{stderr}");
        assert!(matches!(
            client
                .claim(claim("rolled-back", "o-rb", "fp"))
                .await
                .unwrap(),
            Reply::Claimed(_)
        ));
    }
}

async fn leader_now(cluster: &Cluster) -> u64 {
    cluster.wait_for_leader(&cluster.ids()).await
}
