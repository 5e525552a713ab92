//! `once up` as the manifests deploy it: a router per region, each its
//! region's (decision 0097). Every region's router serves every tenant, a
//! tenant's payment is taken by its home region's node whichever router it
//! came through, each router's readiness names its own region, every
//! router serves the nodes' API document at `/openapi.json`, and the
//! provider simulator's line per charge is in `logs/provider.log`.

use once_test_support::ports::port_outside_ephemeral_range;

use super::{Up, cluster_http};
use crate::helpers::{payment_body, post};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_regions_router_serves_every_tenant_at_its_home() {
    let root = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", port_outside_ephemeral_range(&["127.0.0.1"]));
    // The simulator's charges logged, nobody else's chatter.
    let log = [("RUST_LOG", "warn,once_provider_sim=info")];
    let up = Up::start_with_env(root.path(), &listen, &[], &log).await;
    let cluster = &up.cluster;
    let regions: Vec<&str> = cluster["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    let routers = cluster["routers"].as_object().expect("a router per region");
    assert_eq!(routers.len(), regions.len(), "{routers:?}");
    // The first region's router is `router`, on --listen, as before.
    assert_eq!(routers[regions[0]]["url"], format!("http://{listen}"));
    assert_eq!(routers[regions[0]]["url"], cluster["router"]["url"]);
    assert_eq!(routers[regions[0]]["pid"], cluster["router"]["pid"]);

    let http = reqwest::Client::new();
    let node = cluster["regions"][0]["node"]["url"].as_str().unwrap();
    let node_document = json_of(cluster_http(cluster).get(format!("{node}/openapi.json"))).await;
    for region in &regions {
        let router = &routers[*region];
        let url = router["url"].as_str().unwrap();
        let admin = router["admin_url"].as_str().unwrap();
        let ready = json_of(http.get(format!("{admin}/readyz"))).await;
        assert_eq!(ready["region"], *region, "configured for its own region");

        // Every tenant through this router, each served by its home.
        for tenant in cluster["tenants"].as_array().unwrap() {
            let key = tenant["api_key"].as_str().unwrap();
            let home = tenant["home_region"].as_str().unwrap();
            let idempotency_key = format!("via-{region}");
            let body = payment_body("acc_1", "5.00", &idempotency_key);
            let response = post(&http, url, key, Some(&idempotency_key), &body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 201, "{} via {region}", tenant["id"]);
            assert_eq!(response.headers()["x-once-region"], home);
            let payment: serde_json::Value = response.json().await.unwrap();
            assert_eq!(
                payment["region"], home,
                "taken by its home's node: {payment}"
            );
        }

        let document = http
            .get(format!("{url}/openapi.json"))
            .send()
            .await
            .unwrap();
        assert_eq!(document.status(), 200, "no API key needed");
        assert_eq!(
            document.headers()["content-type"],
            "application/json",
            "via {region}"
        );
        let document: serde_json::Value = document.json().await.unwrap();
        assert_eq!(document, node_document, "the node's document, via {region}");
    }

    // A charge per payment, logged by the simulator's own process.
    let provider_log = std::fs::read_to_string(up.dir.join("logs/provider.log")).unwrap();
    let charges = provider_log.matches("charge recorded").count();
    assert!(
        charges >= regions.len() * cluster["tenants"].as_array().unwrap().len(),
        "{charges} charges in provider.log:\n{provider_log}"
    );

    let status = up.stop().await;
    assert!(status.success(), "{status:?}");
}

/// The JSON `request` is answered with.
async fn json_of(request: reqwest::RequestBuilder) -> serde_json::Value {
    request.send().await.unwrap().json().await.unwrap()
}
