//! The preferred leader (`once store --preferred-leader`): the lead goes to
//! it, moves away when it dies, and comes back once it has restarted and
//! caught up — no operator moves it.

use std::time::Duration;

use once_store_client::client::ClientOptions;
use once_store_client::command::Reply;

use super::claim;
use super::cluster::Cluster;
use crate::helpers::eventually;

const PREFERRED: u64 = 2;

async fn leader_is(cluster: &Cluster, among: &[u64], wanted: impl Fn(u64) -> bool) -> u64 {
    eventually(Duration::from_secs(45), || async {
        let leader = cluster.wait_for_leader(among).await;
        wanted(leader).then_some(leader)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lead_returns_to_the_preferred_member_after_it_restarts_and_catches_up() {
    let mut cluster = Cluster::start_with(
        3,
        &["--preferred-leader", &PREFERRED.to_string()],
        |_| vec![],
    )
    .await;
    leader_is(&cluster, &cluster.ids(), |l| l == PREFERRED).await;
    let client = cluster.client(ClientOptions::default());
    assert!(matches!(
        client.claim(claim("k1", "o1", "fp")).await.unwrap(),
        Reply::Claimed(_)
    ));

    cluster.kill(PREFERRED).await;
    let others = [1, 3];
    leader_is(&cluster, &others, |l| l != PREFERRED).await;
    // Written while the preferred member is down: it must catch up before
    // the lead comes back.
    for n in 2..20 {
        assert!(matches!(
            client
                .claim(claim(&format!("k{n}"), &format!("o{n}"), "fp"))
                .await
                .unwrap(),
            Reply::Claimed(_)
        ));
    }

    cluster.spawn(PREFERRED, None).await;
    leader_is(&cluster, &cluster.ids(), |l| l == PREFERRED).await;
    assert!(matches!(
        client.claim(claim("k1", "o1", "fp")).await.unwrap(),
        Reply::Existing(_)
    ));
    assert!(matches!(
        client.claim(claim("after", "o-after", "fp")).await.unwrap(),
        Reply::Claimed(_)
    ));
    cluster.wait_for_convergence(&cluster.ids()).await;
    assert_eq!(super::assert_members_agree(&cluster).await.len(), 20);
}
