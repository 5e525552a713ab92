//! Placement fencing and failover in the raft mode (DESIGN §6, I1–I4):
//! nodes of different regions, each on its own SQLite database, sharing one
//! 3-member raft-store of real processes.

use std::time::Duration;

use once_store_client::command::{Placement, Reply};
use once_store_client::groups::StoreGroups;

use crate::helpers::*;

/// Places `tenant` at `home` (compare-and-set on `expected`); the placement.
pub(crate) async fn place(
    store: &StoreGroups,
    tenant: &str,
    expected: u64,
    home: &str,
    standbys: &[&str],
) -> Placement {
    let standbys: Vec<String> = standbys.iter().map(|s| (*s).to_owned()).collect();
    match store
        .of_tenant(tenant)
        .await
        .unwrap()
        .set_placement(tenant, expected, home, &standbys)
        .await
        .unwrap()
    {
        Reply::Placement(p) => p,
        other => panic!("placement refused: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_at_a_former_home_gets_421_naming_the_new_home_and_replays_and_reads_work_anywhere()
{
    let east_db = TestDb::new(Backend::Raft).await;
    let west_db = TestDb::new(Backend::Sqlite).await;
    let cluster = east_db.store.as_ref().unwrap();
    let store = cluster.store_groups();
    let store_args = east_db.node_args();
    let east = NodeProcess::start_in("us-east", &east_db.url, &store_args, &[], &[]).await;
    let west = NodeProcess::start_in("eu-west", &west_db.url, &store_args, &[], &[]).await;
    let client = reqwest::Client::new();
    place(&store, "acme", 0, "us-east", &["eu-west"]).await;

    // The home region creates; another region refuses to, naming the home.
    let body = payment_body("acc_1", "10.00", "order-home");
    let created = send(post(&client, &east.url, ACME_KEY, Some("k-home"), &body)).await;
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    let other = payment_body("acc_1", "11.00", "order-away");
    let refused = post(&client, &west.url, ACME_KEY, Some("k-away"), &other)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 421);
    assert_eq!(refused.headers()["x-once-home-region"], "us-east");
    let refused = Answer::of(refused).await;
    assert_eq!(refused.error_code(), "MISDIRECTED_REQUEST");
    assert_eq!(refused.json()["homeRegion"], "us-east");
    assert_eq!(refused.json()["placementEpoch"], 1);
    assert_eq!(
        west_db.count("SELECT COUNT(*) FROM payments").await,
        0,
        "nothing written"
    );

    // A finished operation replays from any region, byte for byte. The
    // answer left before the finish was written (decision 0054): until it
    // lands, another region answers that the operation is in progress.
    let replay = answer_once_not_in_progress(Duration::from_secs(10), || {
        post(&client, &west.url, ACME_KEY, Some("k-home"), &body)
    })
    .await;
    assert_eq!(replay.status, 201);
    assert!(replay.replayed);
    assert_eq!(replay.body, created.body);

    // Fail over to eu-west: the former home now refuses new work, the
    // new home takes it — including a business key the old home reserved.
    place(&store, "acme", 1, "eu-west", &["us-east"]).await;
    let stale = send(post(&client, &east.url, ACME_KEY, Some("k-after"), &other)).await;
    assert_eq!(stale.status, 421);
    assert_eq!(stale.json()["homeRegion"], "eu-west");
    assert_eq!(stale.json()["placementEpoch"], 2);
    let moved = send(post(&client, &west.url, ACME_KEY, Some("k-after"), &other)).await;
    assert_eq!(
        moved.status,
        201,
        "{}",
        String::from_utf8_lossy(&moved.body)
    );
    let dup = send(post(&client, &west.url, ACME_KEY, Some("k-dup"), &body)).await;
    assert_eq!(dup.status, 409);
    assert_eq!(dup.error_code(), "DUPLICATE_MERCHANT_REFERENCE");
    assert_eq!(dup.json()["paymentId"], created.json()["id"]);
    assert_eq!(east_db.count("SELECT COUNT(*) FROM payments").await, 1);
    assert_eq!(west_db.count("SELECT COUNT(*) FROM payments").await, 1);

    // The payment made at the former home is no 404 at the new one: its
    // record in raft-store answers for it. Another tenant still learns
    // nothing of it, and an unknown id is still a 404.
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let get = |key: &'static str, id: String| {
        let client = client.clone();
        let url = format!("{}/payments/{id}", west.url);
        async move { send(client.get(url).bearer_auth(key)).await }
    };
    let read = get(ACME_KEY, id.clone()).await;
    assert_eq!(read.status, 200, "{}", String::from_utf8_lossy(&read.body));
    let (read, original) = (read.json(), created.json());
    for field in [
        "id",
        "status",
        "accountId",
        "amount",
        "merchantReference",
        "channel",
        "region",
        "createdAt",
    ] {
        assert_eq!(read[field], original[field], "{field}");
    }
    assert_eq!(get(GLOBEX_KEY, id).await.status, 404);
    let unknown = get(ACME_KEY, "pay_0000000000000000000000000000dead".to_owned()).await;
    assert_eq!(unknown.status, 404);
    east.terminate().await;
    west.terminate().await;
}

/// A region dies mid-charge; the tenant fails over; the new home's
/// recovery worker takes the abandoned record over, asks the provider by
/// key, completes it and materializes the payment in its own database. The
/// client's retry at the new home gets the original payment: one charge.
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_home_finishes_what_the_dead_region_left_in_progress() {
    let east_db = TestDb::new(Backend::Raft).await;
    let west_db = TestDb::new(Backend::Sqlite).await;
    let store = east_db.store.as_ref().unwrap().store_groups();
    let store_args = east_db.node_args();
    let sim = ProviderSim::start().await;
    let args = [
        "--lease",
        "2s",
        // One charge with its three attempts must fit in the lease.
        "--provider-connect-timeout",
        "200ms",
        "--provider-timeout",
        "300ms",
        "--recovery-interval",
        "100ms",
        "--provider-url",
        &sim.url,
    ];
    place(&store, "acme", 0, "us-east", &["eu-west"]).await;
    let mut east = NodeProcess::start_in(
        "us-east",
        &east_db.url,
        &store_args,
        &args,
        &[("FAILPOINTS", "after_provider_charge=return")],
    )
    .await;
    let client = reqwest::Client::new();
    let body = payment_body("acc_1", "42.00", "order-orphan");
    east.dies_answering(
        post(&client, &east.url, ACME_KEY, Some("k-orphan"), &body),
        "us-east",
    )
    .await;
    let charged = sim.ledger().await;
    assert_eq!(charged.len(), 1, "the provider charged before the crash");

    place(&store, "acme", 1, "eu-west", &["us-east"]).await;
    let west = NodeProcess::start_in("eu-west", &west_db.url, &store_args, &args, &[]).await;
    // No client retry needed: the worker finishes it.
    eventually(Duration::from_secs(30), || async {
        (west_db
            .count("SELECT COUNT(*) FROM payments WHERE status = 'succeeded'")
            .await
            == 1)
            .then_some(())
    })
    .await;
    let answer = send(post(&client, &west.url, ACME_KEY, Some("k-orphan"), &body)).await;
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    assert!(
        answer.replayed,
        "the worker completed it; the client gets the stored answer"
    );
    let ledger = sim.ledger().await;
    assert_eq!(
        ledger.len(),
        1,
        "one charge, asked for by key, never repeated"
    );
    assert_eq!(ledger[0].status, "succeeded");
    assert_eq!(
        answer.json()["id"],
        ledger[0]
            .idempotency_key
            .trim_start_matches("provider_payment_"),
        "the record's payment id is the one charged"
    );
    west.terminate().await;
}
