//! A member hosts a group per home region
//! (docs/decisions/0063-a-raft-group-per-home-region.md): each group is its
//! own cluster under `/groups/<name>` on the same listeners, its lead goes
//! to the region where its tenants live, and the directory keeps a tenant's
//! state in one group.

use std::time::Duration;

use once_raft_store::link::GROUP_HEADER;
use once_raft_store::raft_service::WRONG_GROUP;
use once_store_client::admin;
use once_store_client::client::StoreClient;
use once_store_client::command::{NewClaim, Reply};
use once_store_client::groups::group_endpoints;
use once_tls::Role;

use super::claim;
use super::cluster::Cluster;
use crate::helpers::eventually;

const REGIONS: &str = "1=region-1,2=region-2,3=region-3";

/// `claim` for `tenant`: its scope and business key.
fn claim_of(tenant: &str, key: &str) -> NewClaim {
    let mut c = claim(key, &format!("order-{key}"), "fp");
    c.scope.tenant = tenant.into();
    if let Some(business_key) = c.business_key.as_mut() {
        business_key.tenant = tenant.into();
    }
    c
}

/// Waits until every member of `group` names `wanted` as its leader.
pub async fn group_led_by(cluster: &Cluster, group: &str, wanted: u64) {
    let client = cluster.group_client(group);
    eventually(Duration::from_secs(45), || async {
        for i in 0..cluster.members.len() {
            if client.status_of(i).await.ok()?.leader != Some(wanted) {
                return None;
            }
        }
        Some(())
    })
    .await;
}

/// Assigns `tenant` to `group` in the directory, once the cluster has
/// moved to the wire version that carries the command (its leader moves
/// it within a second of starting).
pub async fn assign(directory: &StoreClient, tenant: &str, group: &str) -> Reply {
    eventually(Duration::from_secs(30), || async {
        match directory.assign_tenant(tenant, group).await.unwrap() {
            Reply::NotAgreed { .. } => None,
            reply => Some(reply),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_home_regions_group_is_led_where_its_tenants_live_and_a_tenant_lives_in_one_group() {
    let cluster = Cluster::start_with(
        3,
        &[
            "--peer-regions",
            REGIONS,
            "--groups",
            "region-2,region-3",
            "--preferred-leader",
            "1",
        ],
        |_| vec![],
    )
    .await;
    // Every group elects, and leads from its home region.
    group_led_by(&cluster, "region-2", 2).await;
    group_led_by(&cluster, "region-3", 3).await;
    let directory = cluster.client(cluster.client_options());
    let region_2 = cluster.group_client("region-2");

    // globex is assigned to region-2's group: the directory refuses its
    // claims, its group takes them, and no other group holds them.
    assert_eq!(
        assign(&directory, "globex", "region-2").await,
        Reply::Assigned {
            group: "region-2".into()
        }
    );
    assert_eq!(
        directory.assignment("globex").await.unwrap().as_deref(),
        Some("region-2")
    );
    assert_eq!(
        directory.claim(claim_of("globex", "k1")).await.unwrap(),
        Reply::OtherGroup {
            group: "region-2".into()
        }
    );
    assert!(matches!(
        region_2.claim(claim_of("globex", "k1")).await.unwrap(),
        Reply::Claimed(_)
    ));
    // acme has a record in the directory: it stays there.
    assert!(matches!(
        directory.claim(claim_of("acme", "k1")).await.unwrap(),
        Reply::Claimed(_)
    ));
    assert_eq!(
        directory.assign_tenant("acme", "region-3").await.unwrap(),
        Reply::TenantInUse { assigned: None }
    );
    assert_eq!(directory.assignment("acme").await.unwrap(), None);
    cluster.wait_for_convergence(&cluster.ids()).await;
    let in_directory = super::assert_members_agree(&cluster).await;
    assert_eq!(
        in_directory
            .iter()
            .map(|r| r.scope.tenant.as_str())
            .collect::<Vec<_>>(),
        ["acme"]
    );

    // region-2's tenants now live in region-3 (as after a failover): the
    // group's lead follows them.
    assert!(matches!(
        region_2
            .set_placement("globex", 0, "region-3", &["region-2".into()])
            .await
            .unwrap(),
        Reply::Placement(_)
    ));
    group_led_by(&cluster, "region-2", 3).await;
    // The other groups' leads stay where they were.
    group_led_by(&cluster, "region-3", 3).await;
    assert_eq!(cluster.wait_for_leader(&cluster.ids()).await, 1);
}

/// A member removed from a group's voters and added back with its data, as
/// the runbook does it, rejoins and catches up, its group's leader having
/// been killed and restarted in between; given the address of its
/// directory instead of its group's (the runbook's `/groups/<name>`
/// forgotten), the add is refused, and a Raft RPC that reaches another
/// group of a member is refused before raft sees it, so the directory
/// never takes the group's leader for its own (RELIABILITY finding 15: it
/// did, and a member's directory core stopped on a log that was not its
/// own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_removed_from_a_group_and_added_back_with_its_data_rejoins() {
    let mut cluster = Cluster::start_with(
        3,
        &[
            "--peer-regions",
            REGIONS,
            "--groups",
            "region-2",
            "--preferred-leader",
            "1",
        ],
        |_| vec![],
    )
    .await;
    group_led_by(&cluster, "region-2", 2).await;
    let directory = cluster.client(cluster.client_options());
    assign(&directory, "globex", "region-2").await;
    let group = cluster.group_client("region-2");
    let claim_in_group = |key: String| {
        let group = &group;
        async move {
            eventually(Duration::from_secs(30), || async {
                match group.claim(claim_of("globex", &key)).await {
                    Ok(reply @ Reply::Claimed { .. }) => Some(reply),
                    _ => None,
                }
            })
            .await
        }
    };
    for n in 0..5 {
        claim_in_group(format!("before-{n}")).await;
    }
    let operator = cluster.operator();
    let admins = group_endpoints(&cluster.admin_endpoints(), "region-2");
    admin::change_membership(&operator, &admins, vec![2, 3])
        .await
        .expect("member 1 removed from the group");
    for n in 0..5 {
        claim_in_group(format!("between-{n}")).await;
    }
    cluster.kill(2).await;
    cluster.spawn(2, None).await;
    for n in 0..5 {
        claim_in_group(format!("after-{n}")).await;
    }
    let directory_leader = cluster.wait_for_leader(&cluster.ids()).await;

    // The directory's address, given for the group's learner: refused.
    let refused = admin::add_learner(&operator, &admins, 1, &cluster.advertised(1))
        .await
        .expect_err("the directory's address is not the group's");
    assert!(
        matches!(&refused, admin::AdminError::Refused { status: 400, body, .. }
            if body.contains("learner_address_of_another_group")
                && body.contains(&format!("{}/groups/region-2", cluster.advertised(1)))),
        "{refused}"
    );
    // And a group's RPC that reaches the directory anyway (an address
    // written by hand into a membership) never gets to its raft.
    let member = cluster.http_client_as("member-2", Role::StoreMember);
    let wrong = member
        .post(format!(
            "https://{}/raft/append",
            cluster.members[&1].raft_addr
        ))
        .header(GROUP_HEADER, "region-2")
        .body("not read")
        .send()
        .await
        .expect("an answer");
    assert_eq!(wrong.status(), 409);
    assert!(wrong.text().await.unwrap().starts_with(WRONG_GROUP));

    // Its own address: it rejoins and catches up.
    let address = format!("{}/groups/region-2", cluster.advertised(1));
    admin::add_learner(&operator, &admins, 1, &address)
        .await
        .expect("member 1 a learner of the group");
    admin::change_membership(&operator, &admins, vec![1, 2, 3])
        .await
        .expect("member 1 a voter of the group again");
    claim_in_group("rejoined".into()).await;
    let leader = eventually(Duration::from_secs(30), || async {
        let s = group.status_of(1).await.ok()?;
        (s.leader == Some(2)).then_some(s)
    })
    .await;
    let rejoined = eventually(Duration::from_secs(30), || async {
        let s = group.status_of(0).await.ok()?;
        (s.voters == vec![1, 2, 3] && s.applied_index >= leader.applied_index).then_some(s)
    })
    .await;
    assert_eq!(rejoined.leader, Some(2), "{rejoined:?}");
    // The directory kept its leader throughout, and its log.
    assert_eq!(
        cluster.wait_for_leader(&cluster.ids()).await,
        directory_leader
    );
    cluster.wait_for_convergence(&cluster.ids()).await;
}

/// When a home region's group loses its leader with its region, the lead
/// goes where the group's tenants would fail over to, in one election
/// (decision 0067): tenants homed in region-1 with region-3 their first
/// standby, region-1's member killed three times, and each time member 3
/// — not member 2, which the tie-break between equal logs favours —
/// leads next. Across a 70 ms WAN with `once up`'s timing for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_lead_goes_where_its_tenants_would_fail_over_when_its_region_dies() {
    let mut cluster = Cluster::start_with(
        3,
        &[
            "--peer-regions",
            REGIONS,
            "--groups",
            "region-1",
            "--wan-latency",
            "70",
            "--heartbeat",
            "140ms",
            "--election-min",
            "350ms",
            "--election-max",
            "420ms",
        ],
        |_| vec![],
    )
    .await;
    group_led_by(&cluster, "region-1", 1).await;
    let directory = cluster.client(cluster.client_options());
    assign(&directory, "globex", "region-1").await;
    let group = cluster.group_client("region-1");
    let placed = group
        .set_placement(
            "globex",
            0,
            "region-1",
            &["region-3".to_owned(), "region-2".to_owned()],
        )
        .await
        .unwrap();
    assert!(matches!(placed, Reply::Placement(_)), "{placed:?}");
    for round in 0..3 {
        // Every member has applied the placement (and all else).
        let before = eventually(Duration::from_secs(30), || async {
            let mut applied = std::collections::BTreeSet::new();
            let mut term = 0;
            for i in 0..3 {
                let s = group.status_of(i).await.ok()?;
                applied.insert(s.applied_index);
                term = s.term;
            }
            (applied.len() == 1).then_some(term)
        })
        .await;
        cluster.kill(1).await;
        let next = eventually(Duration::from_secs(30), || async {
            let two = group.status_of(1).await.ok()?;
            let three = group.status_of(2).await.ok()?;
            let elected = two.leader.is_some_and(|l| l != 1);
            (elected && two.leader == three.leader && two.term == three.term).then_some(three)
        })
        .await;
        assert_eq!(
            (next.leader, next.term),
            (Some(3), before + 1),
            "round {round}: {next:?}"
        );
        cluster.spawn(1, None).await;
        // Its tenants still live in region-1: the lead goes back there.
        group_led_by(&cluster, "region-1", 1).await;
    }
}
