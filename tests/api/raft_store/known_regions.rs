//! Issue 48: a router's certificate placed a tenant in a region named
//! `nowhere` and marked an invented region; the tenant got 503 for
//! everything until moved back. A cluster told its regions
//! (`--peer-regions`) refuses any other as `UNKNOWN_REGION` and writes
//! nothing (docs/decisions/0098-regions-validated-on-apply.md).

use std::time::Duration;

use once_store_client::client::{ClientError, ClientOptions};
use once_store_client::command::{RegionStatus, Reply};
use once_tls::Role;

use super::cluster::Cluster;
use crate::helpers::eventually;

const REGIONS: &str = "1=eu-west,2=us-east,3=ap-south";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routers_certificate_cannot_place_a_tenant_in_or_mark_an_invented_region() {
    let cluster = Cluster::start_with(3, &["--peer-regions", REGIONS], |_| vec![]).await;
    cluster.wait_for_leader(&cluster.ids()).await;
    let router = cluster.client(ClientOptions {
        tls: Some(cluster.identity("router", Role::Router)),
        ..Default::default()
    });
    let unknown = Reply::UnknownRegion {
        region: "nowhere".into(),
    };

    // Placed in an invented region, or with one as its standby: refused,
    // and the tenant stays unplaced (its preferred home is not fixed).
    let placed = router
        .set_placement("acme", 0, "nowhere", &["us-east".to_owned()])
        .await
        .unwrap();
    assert_eq!(placed, unknown);
    let standby = router
        .set_placement("acme", 0, "eu-west", &["nowhere".to_owned()])
        .await
        .unwrap();
    assert_eq!(standby, unknown);
    let evacuated = router
        .evacuate_region("eu-west", &["nowhere".to_owned()])
        .await
        .unwrap();
    assert_eq!(evacuated, unknown);
    assert_eq!(router.placement("acme").await.unwrap(), None);

    // An invented region's status: a stable error, and no row.
    let marked = router
        .set_region_status("nowhere", RegionStatus::Down)
        .await;
    assert!(
        matches!(&marked, Err(ClientError::UnknownRegion(r)) if r == "nowhere"),
        "{marked:?}"
    );
    assert!(
        router
            .regions()
            .await
            .unwrap()
            .iter()
            .all(|(r, _)| r != "nowhere")
    );

    // The real regions are taken as before.
    let Reply::Placement(placement) = router
        .set_placement("acme", 0, "eu-west", &["us-east".to_owned()])
        .await
        .unwrap()
    else {
        panic!("a real region refused")
    };
    assert_eq!(placement.preferred_home, "eu-west");
    router
        .set_region_status("us-east", RegionStatus::Healthy)
        .await
        .unwrap();

    // The leader declares the regions in the log (within a round of its
    // housekeeping), so every member's apply refuses the same way whatever
    // its own flags, and a log replayed anywhere makes the same refusal.
    for id in cluster.ids() {
        eventually(Duration::from_secs(30), || async {
            let status = cluster.status(id).await?;
            (status.known_regions == ["ap-south", "eu-west", "us-east"]).then_some(())
        })
        .await;
    }
    let moved = router
        .set_placement("acme", placement.epoch, "nowhere", &[])
        .await
        .unwrap();
    assert_eq!(moved, unknown);
    assert_eq!(
        router.placement("acme").await.unwrap().unwrap().home,
        "eu-west"
    );
}
