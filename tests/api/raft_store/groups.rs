//! A member hosts a group per home region
//! (docs/decisions/0063-a-raft-group-per-home-region.md): each group is its
//! own cluster under `/groups/<name>` on the same listeners, its lead goes
//! to the region where its tenants live, and the directory keeps a tenant's
//! state in one group.

use std::time::Duration;

use once_store_client::client::StoreClient;
use once_store_client::command::{NewClaim, Reply};

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
