//! `--mode partition` against stand-in store members and a stand-in router
//! that record what they are told: the partitioned region's member is
//! isolated, every other member and the router cut that region (the router
//! with the admin token), all of them are healed, and a switch that does
//! not exist — or that cut but lost its answer — leaves nothing cut behind.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use once_drill::cluster::Cluster;
use once_drill::fault::{Fault, FaultError, FaultMode};
use once_test_support::serve::serve;
use serde_json::{Value, json};

/// What one stand-in switch was told, in order: (Authorization, body).
type Calls = Arc<Mutex<Vec<(Option<String>, Value)>>>;

fn record(calls: &Calls, headers: &HeaderMap, body: &str) {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    calls
        .lock()
        .unwrap()
        .push((auth, serde_json::from_str(body).unwrap()));
}

/// How a stand-in switch behaves.
#[derive(Clone, Copy, PartialEq)]
enum Switch {
    /// Applies what it is told and says so.
    Works,
    /// An older build: `POST /admin/partition` is a 404.
    Missing,
    /// Applies what it is told, then fails to say so (the answer is lost).
    AppliesThenFails,
}

/// A server with `POST /admin/partition` recording its calls, behaving as
/// `kind` says.
async fn switch(kind: Switch) -> (String, Calls) {
    let calls = Calls::default();
    let app = match kind {
        Switch::Missing => Router::new(),
        Switch::Works | Switch::AppliesThenFails => Router::new()
            .route(
                "/admin/partition",
                post(
                    move |State(calls): State<Calls>, headers: HeaderMap, body: String| async move {
                        record(&calls, &headers, &body);
                        if kind == Switch::Works {
                            StatusCode::OK
                        } else {
                            StatusCode::INTERNAL_SERVER_ERROR
                        }
                    },
                ),
            )
            .with_state(calls.clone()),
    };
    (format!("http://{}", serve(app).await), calls)
}

struct Stand {
    cluster: Cluster,
    eu: Calls,
    us: Calls,
    ap: Calls,
    router: Calls,
}

async fn stand_in(ap_member: Switch, router_switch: Switch) -> Stand {
    let (eu_url, eu) = switch(Switch::Works).await;
    let (us_url, us) = switch(Switch::Works).await;
    let (ap_url, ap) = switch(ap_member).await;
    let (router_url, router) = switch(router_switch).await;
    let region = |name: &str, store: &str| {
        json!({"name": name, "node": {"url": "http://node.invalid"},
               "store": {"api_url": format!("{store}/")},
               "database_url": "/tmp/unused.db"})
    };
    let cluster: Cluster = serde_json::from_value(json!({
        "router": {"url": router_url},
        "provider": {"url": "http://provider.invalid"},
        "admin_token": "drill-admin-token",
        "tenants": [{"id": "acme", "api_key": "k", "home_region": "eu-west"}],
        "regions": [region("eu-west", &eu_url), region("us-east", &us_url), region("ap-south", &ap_url)],
    }))
    .unwrap();
    Stand {
        cluster,
        eu,
        us,
        ap,
        router,
    }
}

fn bodies(calls: &Calls) -> Vec<Value> {
    calls
        .lock()
        .unwrap()
        .iter()
        .map(|(_, b)| b.clone())
        .collect()
}

fn plan(stand: &Stand, region: &str) -> Fault {
    let region = stand
        .cluster
        .region(region, std::path::Path::new("cluster.json"))
        .unwrap();
    Fault::plan(
        FaultMode::Partition,
        &stand.cluster,
        region,
        &reqwest::Client::new(),
    )
}

#[tokio::test]
async fn partitioning_a_region_isolates_its_member_and_every_other_member_and_the_router_cut_it() {
    let stand = stand_in(Switch::Works, Switch::Works).await;
    let fault = plan(&stand, "eu-west");

    let injection = fault.inject().await;
    assert!(injection.injected, "{injection:#?}");
    let steps = injection.steps;
    assert_eq!(steps.len(), 4, "{steps:#?}");
    assert!(steps[0].contains("(isolated)"), "{steps:#?}");
    assert!(steps[3].starts_with("cut router"), "{steps:#?}");
    assert_eq!(bodies(&stand.eu), [json!({"isolated": true})]);
    for other in [&stand.us, &stand.ap] {
        assert_eq!(bodies(other), [json!({"cut_regions": ["eu-west"]})]);
    }
    assert_eq!(bodies(&stand.router), [json!({"cut_regions": ["eu-west"]})]);
    assert_eq!(
        stand.router.lock().unwrap()[0].0.as_deref(),
        Some("Bearer drill-admin-token"),
        "the router's switch is behind its admin token"
    );

    let healed = fault.heal().await.unwrap();
    assert_eq!(healed.len(), 4, "{healed:#?}");
    assert_eq!(
        bodies(&stand.eu),
        [json!({"isolated": true}), json!({"isolated": false})]
    );
    for other in [&stand.us, &stand.ap, &stand.router] {
        assert_eq!(bodies(other)[1], json!({"cut_regions": []}));
    }
}

#[tokio::test]
async fn a_router_without_the_switch_is_reported_and_the_members_already_cut_are_healed() {
    let stand = stand_in(Switch::Works, Switch::Missing).await;
    let fault = plan(&stand, "us-east");

    let injection = fault.inject().await;
    assert!(!injection.injected);
    let error = injection.error.unwrap();
    assert!(
        matches!(&error, FaultError::SwitchMissing { switch } if switch.starts_with("router")),
        "{error}"
    );
    assert!(error.to_string().contains("HTTP 404"), "{error}");
    assert_eq!(
        bodies(&stand.us),
        [json!({"isolated": true}), json!({"isolated": false})]
    );
    for other in [&stand.eu, &stand.ap] {
        assert_eq!(
            bodies(other),
            [
                json!({"cut_regions": ["us-east"]}),
                json!({"cut_regions": []})
            ]
        );
    }
}

#[tokio::test]
async fn a_region_without_a_store_member_cannot_be_partitioned() {
    let mut stand = stand_in(Switch::Works, Switch::Works).await;
    stand.cluster.regions[0].store = None;
    let fault = plan(&stand, "eu-west");
    let injection = fault.inject().await;
    assert!(!injection.injected);
    assert!(matches!(
        injection.error,
        Some(FaultError::NoSwitches { .. })
    ));
    assert!(bodies(&stand.us).is_empty() && bodies(&stand.router).is_empty());
}

#[tokio::test]
async fn a_member_that_cut_but_lost_its_answer_is_healed_with_the_ones_before_it() {
    let stand = stand_in(Switch::AppliesThenFails, Switch::Works).await;
    let fault = plan(&stand, "eu-west");

    let injection = fault.inject().await;
    assert!(!injection.injected);
    let error = injection.error.unwrap();
    assert!(
        matches!(&error, FaultError::SwitchRefused { status: 500, .. }),
        "{error}"
    );
    assert_eq!(
        bodies(&stand.ap),
        [
            json!({"cut_regions": ["eu-west"]}),
            json!({"cut_regions": []})
        ],
        "the member whose answer was lost may have cut: it is healed too"
    );
    assert_eq!(
        bodies(&stand.eu),
        [json!({"isolated": true}), json!({"isolated": false})]
    );
    assert_eq!(
        bodies(&stand.us),
        [
            json!({"cut_regions": ["eu-west"]}),
            json!({"cut_regions": []})
        ]
    );
    assert!(
        bodies(&stand.router).is_empty(),
        "nothing after the failed switch was cut"
    );
}
