//! Trust on the store's links (DESIGN §10, decision 0032): every listener
//! of a member is mutual TLS with the cluster's CA, and each caller is
//! authorised by the identity its certificate names. The attacks of issue
//! 14, replayed against a running cluster: none of them gets through.
use once_store_client::admin;
use once_store_client::command::{ClientRequest, Op, RegionStatus, Reply};
use once_store_client::protocol::{
    ADD_LEARNER_PATH, CHANGE_MEMBERSHIP_PATH, ELECT_PATH, READ_PATH, RECORDS_PATH, Read,
    STATUS_PATH, WRITE_PATH,
};
use once_store_client::wire;
use once_test_support::client::status_of;
use once_test_support::fixtures::STORE_ADMIN_TOKEN;
use once_test_support::pki::TestPki;
use once_tls::{Role, Tls};
use serde::Serialize;

use super::claim;
use super::cluster::Cluster;

fn client_of(tls: &Tls) -> reqwest::Client {
    tls.http_client().build().unwrap()
}

/// A write as a store client sends it, postcard-encoded.
fn write_of(op: Op) -> Vec<u8> {
    wire::encode(&ClientRequest {
        client: 7,
        seq: 1,
        acked_below: 0,
        now: 1,
        op,
    })
    .unwrap()
}

async fn post(http: &reqwest::Client, url: &str, body: Vec<u8>) -> (u16, String) {
    let r = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, wire::CONTENT_TYPE)
        .bearer_auth(STORE_ADMIN_TOKEN)
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn post_json(http: &reqwest::Client, url: &str, body: serde_json::Value) -> (u16, String) {
    let r = http
        .post(url)
        .bearer_auth(STORE_ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn assert_forbidden((status, body): (u16, String), what: &str) {
    assert_eq!(status, 403, "{what}: {body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["errorCode"], "FORBIDDEN", "{what}: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listener_refuses_plain_http_no_certificate_and_another_cas_certificate() {
    let cluster = Cluster::start(3).await;
    let member = &cluster.members[&1];

    // Trusts the cluster's CA, presents nothing.
    let ca = std::fs::read(cluster.pki.issue("probe", "test", Role::Operator, &[]).ca).unwrap();
    let anonymous = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .build()
        .unwrap();
    // A certificate with a good identity, from another CA.
    let elsewhere = tempfile::tempdir().unwrap();
    let foreign = client_of(&TestPki::new(elsewhere.path()).tls("op", "test", Role::Operator));
    let plain = reqwest::Client::new();
    let operator = cluster.operator();

    for (listener, addr, path) in [
        ("raft", member.raft_addr, "/raft/initialized"),
        ("client API", member.api_addr, STATUS_PATH),
        ("admin", member.admin_addr, "/metrics"),
    ] {
        let https = format!("https://{addr}{path}");
        let http = format!("http://{addr}{path}");
        status_of(&plain, &http)
            .await
            .expect_err(&format!("{listener}: plain HTTP got an answer"));
        if listener == "admin" {
            // Probes present no certificate: health and readiness only.
            assert_eq!(status_of(&anonymous, &https).await, Ok(403), "{listener}");
            let probe = format!("https://{addr}/healthz");
            assert_eq!(status_of(&anonymous, &probe).await, Ok(200), "{listener}");
        } else {
            status_of(&anonymous, &https)
                .await
                .expect_err(&format!("{listener}: no client certificate got an answer"));
        }
        status_of(&foreign, &https).await.expect_err(&format!(
            "{listener}: another CA's certificate got an answer"
        ));
        // The same path, with the operator's certificate of this CA.
        let admitted = status_of(operator.http(), &https).await.unwrap();
        let expected = if listener == "raft" { 403 } else { 200 };
        assert_eq!(admitted, expected, "{listener}: the operator");
    }

    // The store client and the operator client of another CA find nobody.
    let refused = admin::Operator::with_tls(
        None,
        Some(&TestPki::new(&elsewhere.path().join("again")).tls("op", "test", Role::Operator)),
    )
    .status(&member.endpoint())
    .await;
    assert!(refused.is_err(), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_certificate_cannot_move_tenants_mark_regions_change_membership_elect_or_dump() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader(&cluster.ids()).await;
    let node = client_of(&cluster.identity("node", Role::Node));
    let router = client_of(&cluster.identity("router", Role::Router));
    let member = &cluster.members[&leader];
    let write = format!("https://{}{WRITE_PATH}", member.endpoint());
    let read = format!("https://{}{READ_PATH}", member.endpoint());
    let admin_url = |path: &str| format!("https://{}{path}", member.admin_endpoint());

    // A tenant moved to an invented region, a region marked down.
    let moved = Op::SetPlacement {
        tenant: "acme".into(),
        expected_epoch: 0,
        home: "invented".into(),
        standbys: vec![],
    };
    let marked = Op::SetRegionStatus {
        region: "eu-west".into(),
        status: RegionStatus::Down,
    };
    assert_forbidden(
        post(&node, &write, write_of(moved)).await,
        "node moves a tenant",
    );
    assert_forbidden(
        post(&node, &write, write_of(marked)).await,
        "node marks a region",
    );
    // Every placement (a node reads only its tenants' one at a time).
    assert_forbidden(
        post(&node, &read, wire::encode(&Read::Placements).unwrap()).await,
        "node reads every placement",
    );
    assert_forbidden(
        post(
            &router,
            &read,
            wire::encode(&Read::Records(Default::default())).unwrap(),
        )
        .await,
        "router dumps records",
    );
    // The operator endpoints, even with the admin token.
    let get_records = node
        .get(admin_url(RECORDS_PATH))
        .bearer_auth(STORE_ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_forbidden(
        (
            get_records.status().as_u16(),
            get_records.text().await.unwrap(),
        ),
        "node GET /admin/records",
    );
    for (path, body) in [
        (ELECT_PATH, serde_json::json!(null)),
        (CHANGE_MEMBERSHIP_PATH, serde_json::json!({"voters": [1]})),
        (
            ADD_LEARNER_PATH,
            serde_json::json!({"id": 9, "raft_addr": "203.0.113.9:7001"}),
        ),
        ("/admin/partition", serde_json::json!({"isolated": true})),
    ] {
        assert_forbidden(post_json(&node, &admin_url(path), body).await, path);
    }

    // Nothing changed: same voters, no partition, no placement.
    let status = cluster.status(leader).await.unwrap();
    assert_eq!(status.voters, vec![1, 2, 3]);
    assert_eq!(status.leader, Some(leader));
    let operator = cluster.operator();
    assert!(
        !admin::partition(&operator, &member.admin_endpoint())
            .await
            .unwrap()
            .isolated
    );
    let store = cluster.client(Default::default());
    assert_eq!(store.placement("acme").await.unwrap(), None);

    // Each role keeps what it needs: a node claims, a router fails over.
    let as_node = cluster.client(once_store_client::client::ClientOptions {
        tls: Some(cluster.identity("node-2", Role::Node)),
        ..Default::default()
    });
    as_node
        .claim(claim("k-trust", "o-trust", "fp"))
        .await
        .unwrap();
    let as_router = cluster.client(once_store_client::client::ClientOptions {
        tls: Some(cluster.identity("router-2", Role::Router)),
        ..Default::default()
    });
    as_router
        .set_placement("acme", 0, "eu-west", &["us-east".to_owned()])
        .await
        .unwrap();
    assert_eq!(
        store.placement("acme").await.unwrap().unwrap().home,
        "eu-west"
    );

    // A whole region's failover and failback in one write: the router's
    // too, never a node's.
    let failover = Op::MoveRegion {
        from: "eu-west".into(),
        eligible: vec!["us-east".into()],
    };
    assert_forbidden(
        post(&node, &write, write_of(failover)).await,
        "node fails a region over",
    );
    assert_forbidden(
        post(
            &node,
            &write,
            write_of(Op::ReturnHome {
                to: "us-east".into(),
            }),
        )
        .await,
        "node fails tenants back",
    );
    let still = store.placement("acme").await.unwrap().unwrap();
    assert_eq!((still.home.as_str(), still.epoch), ("eu-west", 1));
    let moved = as_router
        .move_region("eu-west", &["us-east".to_owned()])
        .await
        .unwrap();
    assert!(
        matches!(&moved, Reply::Moved { moved, .. } if moved.len() == 1 && moved[0].placement.home == "us-east"),
        "{moved:?}"
    );
}

/// openraft 0.9's vote request as postcard lays it out (field order, no
/// names): what a member's `/raft/vote` decodes.
#[derive(Serialize)]
struct LeaderId {
    term: u64,
    node_id: u64,
}

#[derive(Serialize)]
struct Vote {
    leader_id: LeaderId,
    committed: bool,
}

#[derive(Serialize)]
struct LogId {
    leader_id: LeaderId,
    index: u64,
}

#[derive(Serialize)]
struct VoteRequest {
    vote: Vote,
    last_log_id: Option<LogId>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_vote_at_a_high_term_with_a_node_certificate_changes_no_term() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader(&cluster.ids()).await;
    let before = cluster.status(leader).await.unwrap().term;
    let forged = wire::encode(&VoteRequest {
        vote: Vote {
            leader_id: LeaderId {
                term: 1000,
                node_id: 9,
            },
            committed: false,
        },
        last_log_id: Some(LogId {
            leader_id: LeaderId {
                term: 999,
                node_id: 9,
            },
            index: 1_000_000,
        }),
    })
    .unwrap();
    let node = client_of(&cluster.identity("node", Role::Node));
    for id in cluster.ids() {
        let url = format!("https://{}/raft/vote", cluster.members[&id].raft_addr);
        assert_forbidden(post(&node, &url, forged.clone()).await, "a node's vote");
    }
    for id in cluster.ids() {
        let status = cluster.status(id).await.unwrap();
        assert_eq!(status.term, before, "member {id}: {status:?}");
        assert_eq!(status.leader, Some(leader), "member {id}: {status:?}");
    }
}
