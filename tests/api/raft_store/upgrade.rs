//! A rolling upgrade of raft-store across a wire version
//! (docs/decisions/0041-wire-versions.md): one member still speaks the
//! version before (`ONCE_STORE_WIRE_VERSION=1`, as a member of the build
//! before declares itself), and the cluster serves on it without moving;
//! a node of the build before (no version header) is served by the new
//! members; once the last member restarts on the new version the leader
//! moves the cluster to it, and the command it brings — forgetting idle
//! clients' dedup entries — runs.

use std::time::Duration;

use once_store_client::client::ClientOptions;
use once_store_client::command::{ClientRequest, Op, Reply};
use once_store_client::protocol::{WRITE_PATH, WireStatus, WriteAnswer};
use once_store_client::wire::{self, VERSION_HEADER, WIRE_VERSION};
use once_tls::Role;

use super::cluster::Cluster;
use super::{assert_members_agree, claim};
use crate::helpers::eventually;

/// What the leader says of wire versions once it has heard every member.
async fn wire_once_all_heard(cluster: &Cluster) -> (u64, WireStatus) {
    eventually(Duration::from_secs(30), || async {
        let leader = cluster.wait_for_leader(&cluster.ids()).await;
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
    let still_old = |id| {
        if id == 3 {
            vec![("ONCE_STORE_WIRE_VERSION".to_owned(), "1".to_owned())]
        } else {
            vec![]
        }
    };
    let mut cluster = Cluster::start_with(3, &["--forget-clients-after", "1h"], still_old).await;
    let client = cluster.client(ClientOptions::default());
    assert!(matches!(
        client
            .claim(claim("before", "o-before", "fp"))
            .await
            .unwrap(),
        Reply::Claimed(_)
    ));

    // Mid-roll: every member heard, member 3 on version 1, so the cluster
    // agrees on 1 and stays there.
    let (leader, wire) = wire_once_all_heard(&cluster).await;
    assert_eq!(wire.members[&3], 1, "{wire:?}");
    assert_eq!(wire.agreed, Some(1));
    cluster.wait_for_convergence(&cluster.ids()).await;
    for id in cluster.ids() {
        assert_eq!(
            cluster.status(id).await.unwrap().wire.cluster,
            1,
            "member {id}"
        );
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
    let speaks = if leader == 3 { 1 } else { WIRE_VERSION };
    assert_eq!(declared, Some(speaks.to_string()));
    assert!(
        matches!(answer, Some(WriteAnswer::Done(Reply::Claimed(_)))),
        "{answer:?}"
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
    cluster.kill(3).await;
    cluster.set_env(3, vec![]);
    cluster.spawn(3, None).await;
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
}

async fn leader_now(cluster: &Cluster) -> u64 {
    cluster.wait_for_leader(&cluster.ids()).await
}
