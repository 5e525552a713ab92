//! `once up`'s control endpoint restarting one process at a time, on the
//! running cluster of `up.rs`'s scenario (another cluster would cost a
//! minute): a node stopped with SIGTERM comes back as a new process; a node
//! started two hours ahead says so in its `Date` header, and is back on the
//! real clock after a restart with no offset; the router killed and started
//! again; a store member removed, wiped and started blank, then added back
//! as a voter that catches up. Requests the endpoint must refuse are
//! refused before anything is stopped.

use std::path::Path;
use std::time::{Duration, SystemTime};

use once_drill::control::{Control, RestartOptions, Stop, Stopped};
use once_store_client::admin::{self, Operator};
use once_test_support::process::alive;

use crate::helpers::{eventually, payment_body, post, send};
use crate::up::cluster_http;

/// `dir/cluster.json` as `once up` last wrote it.
fn cluster_now(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).unwrap()).unwrap()
}

/// The pid `cluster.json` gives `role` (`node`, `store`) of `region`.
fn pid_in_cluster_json(dir: &Path, region: &str, role: &str) -> i32 {
    let cluster = cluster_now(dir);
    let region = cluster["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == region)
        .unwrap()
        .clone();
    region[role]["pid"].as_i64().unwrap() as i32
}

/// How many seconds ahead of this test's clock `url`'s process is, from the
/// `Date` header of its answer.
async fn clock_ahead_of_ours(client: &reqwest::Client, url: &str) -> i64 {
    let answer = client.get(url).send().await.unwrap();
    let date = answer.headers()[reqwest::header::DATE].to_str().unwrap();
    let theirs = httpdate::parse_http_date(date).unwrap();
    let now = SystemTime::now();
    match theirs.duration_since(now) {
        Ok(ahead) => ahead.as_secs() as i64,
        Err(behind) => -(behind.duration().as_secs() as i64),
    }
}

async fn status_200(client: &reqwest::Client, url: &str) -> bool {
    client
        .get(url)
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

pub(super) async fn one_process_at_a_time(dir: &Path) {
    let cluster = cluster_now(dir);
    let control =
        Control::new(&serde_json::from_value(cluster["control"].clone()).unwrap()).unwrap();
    // Not the router's region (its first): the router's own store member
    // and node are left alone.
    let region = cluster["regions"][2]["name"].as_str().unwrap().to_owned();
    let node_url = cluster["regions"][2]["node"]["url"]
        .as_str()
        .unwrap()
        .to_owned();

    requests_it_must_refuse_change_nothing(dir, &control, &region).await;
    // Nodes answer routers and the operator only (mutual TLS).
    let operator = cluster_http(&cluster);
    a_node_stopped_with_sigterm_comes_back_as_a_new_process(
        dir, &control, &operator, &region, &node_url,
    )
    .await;
    if crate::raft_store::faketime_available() {
        a_node_started_two_hours_ahead_says_so_and_comes_back_on_time(
            &control, &operator, &cluster, &region, &node_url,
        )
        .await;
    }
    the_router_killed_comes_back(dir, &control, &cluster).await;
    a_wiped_member_starts_blank_and_catches_up_once_added_back(dir, &control, &cluster).await;
}

async fn requests_it_must_refuse_change_nothing(dir: &Path, control: &Control, region: &str) {
    let node = format!("node-{region}");
    let pid = pid_in_cluster_json(dir, region, "node");
    let refused = |process: &str, options: RestartOptions| {
        let process = process.to_owned();
        async move {
            format!(
                "{:#}",
                control
                    .restart_process(&process, &options)
                    .await
                    .unwrap_err()
            )
        }
    };
    let unknown = refused("node-mars", RestartOptions::default()).await;
    assert!(
        unknown.contains("404") && unknown.contains(region),
        "{unknown}"
    );
    let wipe_a_node = refused(
        &node,
        RestartOptions {
            wipe: true,
            ..RestartOptions::default()
        },
    )
    .await;
    assert!(wipe_a_node.contains("400"), "{wipe_a_node}");
    let running = refused(
        &node,
        RestartOptions {
            stop: Stop::None,
            ..RestartOptions::default()
        },
    )
    .await;
    assert!(
        running.contains("409") && running.contains("still running"),
        "{running}"
    );
    let cluster = cluster_now(dir);
    let bad_body = reqwest::Client::new()
        .post(format!(
            "{}/processes/{node}/restart",
            cluster["control"]["url"].as_str().unwrap()
        ))
        .bearer_auth(cluster["control"]["token"].as_str().unwrap())
        .header("content-type", "application/json")
        .body(r#"{"stop": "gently"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(bad_body.status(), 400);
    assert!(alive(pid), "nothing was stopped");
    assert_eq!(pid_in_cluster_json(dir, region, "node"), pid);
}

async fn a_node_stopped_with_sigterm_comes_back_as_a_new_process(
    dir: &Path,
    control: &Control,
    operator: &reqwest::Client,
    region: &str,
    node_url: &str,
) {
    let before = pid_in_cluster_json(dir, region, "node");
    let restarted = control
        .restart_process(&format!("node-{region}"), &RestartOptions::default())
        .await
        .expect("a graceful restart");
    assert_eq!(restarted.process, format!("node-{region}"));
    assert_eq!(restarted.previous_pid as i32, before);
    assert_ne!(restarted.pid as i32, before);
    assert_eq!(
        restarted.stopped,
        Stopped::Sigterm,
        "a node drains and exits on SIGTERM"
    );
    assert!((restarted.clock_offset_seconds, restarted.wiped) == (0, false));
    assert!(!alive(before), "the old node is gone");
    assert!(alive(restarted.pid as i32));
    assert_eq!(
        pid_in_cluster_json(dir, region, "node"),
        restarted.pid as i32
    );
    assert!(status_200(operator, &format!("{node_url}/readyz")).await);
}

async fn a_node_started_two_hours_ahead_says_so_and_comes_back_on_time(
    control: &Control,
    operator: &reqwest::Client,
    cluster: &serde_json::Value,
    region: &str,
    node_url: &str,
) {
    let node = format!("node-{region}");
    let skewed = control
        .restart_process(
            &node,
            &RestartOptions {
                clock_offset_seconds: 7200,
                ..RestartOptions::default()
            },
        )
        .await
        .expect("a restart two hours ahead");
    assert_eq!(skewed.clock_offset_seconds, 7200);
    let ahead = clock_ahead_of_ours(operator, &format!("{node_url}/readyz")).await;
    assert!(
        (ahead - 7200).abs() <= 120,
        "the node's Date is {ahead} s ahead"
    );
    the_store_leader_not_the_node_stamps_its_records(operator, cluster, region, node_url).await;

    let on_time = control
        .restart_process(
            &node,
            &RestartOptions {
                stop: Stop::Kill,
                ..RestartOptions::default()
            },
        )
        .await
        .expect("a restart on the real clock");
    assert_eq!(on_time.stopped, Stopped::Sigkill);
    assert_eq!(on_time.previous_pid, skewed.pid);
    let ahead = clock_ahead_of_ours(operator, &format!("{node_url}/readyz")).await;
    assert!(ahead.abs() <= 60, "the node's Date is {ahead} s off");
}

/// Sends `region`'s tenants home (`POST /admin/failback` on the router,
/// until it answers 200): restarting a region's only node takes longer
/// than the router's detection window (600 ms, decision 0036), so its
/// tenants may have failed over meanwhile.
async fn home_again(client: &reqwest::Client, cluster: &serde_json::Value, region: &str) {
    let router = &cluster["router"];
    let admin = router["admin_url"]
        .as_str()
        .or(router["url"].as_str())
        .unwrap();
    let token = cluster["admin_tokens"]["router"].as_str().unwrap();
    eventually(Duration::from_secs(30), || async {
        let answer = client
            .post(format!("{admin}/admin/failback"))
            .bearer_auth(token)
            .json(&serde_json::json!({ "region": region }))
            .send()
            .await
            .ok()?;
        answer.status().is_success().then_some(())
    })
    .await;
}

/// A payment made through a node two hours ahead: its record's times are
/// the store leader's, within a minute of ours, its replay window a day
/// from now rather than from the node's clock (so nothing of it can expire
/// or be taken over early by that clock).
async fn the_store_leader_not_the_node_stamps_its_records(
    client: &reqwest::Client,
    cluster: &serde_json::Value,
    region: &str,
    node_url: &str,
) {
    home_again(client, cluster, region).await;
    let tenant = cluster["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["home_region"] == region)
        .unwrap();
    let body = payment_body("acc_skewed", "7.00", "order-skewed");
    let answer = send(post(
        client,
        node_url,
        tenant["api_key"].as_str().unwrap(),
        Some("k-skewed"),
        &body,
    ))
    .await;
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let node_admin = cluster["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == region)
        .unwrap()["node"]["admin_url"]
        .as_str()
        .unwrap()
        .to_owned();
    // The answer left before the finish was written (decision 0054): wait
    // for the finished record, which has its replay window.
    let records: Vec<serde_json::Value> = eventually(Duration::from_secs(10), || {
        let request = client
            .get(format!(
                "{node_admin}/admin/records/{}/k-skewed",
                tenant["id"].as_str().unwrap()
            ))
            .bearer_auth(cluster["admin_tokens"]["node"].as_str().unwrap());
        async move {
            let records: Vec<serde_json::Value> = request
                .send()
                .await
                .unwrap()
                .error_for_status()
                .unwrap()
                .json()
                .await
                .unwrap();
            records[0]["expiresAt"].is_i64().then_some(records)
        }
    })
    .await;
    let ours = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let record = &records[0];
    let minute = 60_000;
    for field in ["createdAt", "updatedAt"] {
        let at = record[field].as_i64().unwrap();
        assert!(
            (at - ours).abs() <= minute,
            "{field} {at} is {} ms from our clock: the skewed node stamped it",
            at - ours
        );
    }
    let expires_at = record["expiresAt"].as_i64().unwrap();
    let day = 86_400_000;
    assert!(
        expires_at <= ours + day + minute,
        "the replay window ends {} ms after a day from now",
        expires_at - ours - day
    );
}

async fn the_router_killed_comes_back(dir: &Path, control: &Control, cluster: &serde_json::Value) {
    let before = cluster_now(dir)["router"]["pid"].as_i64().unwrap() as i32;
    let restarted = control
        .restart_process(
            "router",
            &RestartOptions {
                stop: Stop::Kill,
                ..RestartOptions::default()
            },
        )
        .await
        .expect("the router restarted");
    assert_eq!(restarted.stopped, Stopped::Sigkill);
    assert_eq!(restarted.previous_pid as i32, before);
    assert!(!alive(before));
    assert_eq!(
        cluster_now(dir)["router"]["pid"].as_i64(),
        Some(i64::from(restarted.pid))
    );
    let router = cluster["router"]["url"].as_str().unwrap();
    assert!(status_200(&reqwest::Client::new(), &format!("{router}/readyz")).await);
}

async fn a_wiped_member_starts_blank_and_catches_up_once_added_back(
    dir: &Path,
    control: &Control,
    cluster: &serde_json::Value,
) {
    let operator = Operator::with_tls(
        Some(
            &once_edge::AdminToken::new(cluster["admin_tokens"]["store"].as_str().unwrap())
                .unwrap(),
        ),
        Some(&super::operator_tls(cluster)),
    );
    let regions = cluster["regions"].as_array().unwrap();
    let members: Vec<(u64, String, String)> = regions
        .iter()
        .map(|r| {
            let store = &r["store"];
            (
                store["id"].as_u64().unwrap(),
                store["admin_url"].as_str().unwrap().to_owned(),
                store["raft_addr"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let admin_endpoints: Vec<String> = members.iter().map(|(_, a, _)| a.clone()).collect();
    let every_id: Vec<u64> = members.iter().map(|(id, _, _)| *id).collect();
    let leader = operator.leader_endpoint(&admin_endpoints).await.unwrap();
    // A follower: wiping the leader would test an election too.
    let (at, (id, endpoint, raft_addr)) = members
        .iter()
        .enumerate()
        .rev()
        .find(|(_, (_, admin, _))| *admin != leader)
        .unwrap();
    let region = regions[at]["name"].as_str().unwrap();

    // Removed first: a member still in the membership would be sent the
    // log by the leader the moment it answers, blank or not.
    let others: Vec<u64> = every_id.iter().copied().filter(|i| i != id).collect();
    admin::change_membership(&operator, &admin_endpoints, others)
        .await
        .expect("remove the member");
    let before = pid_in_cluster_json(dir, region, "store");
    let wiped = control
        .restart_process(
            &format!("store-{region}"),
            &RestartOptions {
                wipe: true,
                ..RestartOptions::default()
            },
        )
        .await
        .expect("a wiped restart");
    assert!(wiped.wiped);
    assert_eq!(wiped.previous_pid as i32, before);
    assert_eq!(pid_in_cluster_json(dir, region, "store"), wiped.pid as i32);
    let blank = operator
        .status(endpoint)
        .await
        .expect("a blank member answers");
    assert!(!blank.voters.contains(id), "{blank:?}");
    assert_eq!(blank.last_log_index, None, "{blank:?}");
    assert_eq!(blank.applied_index, None, "{blank:?}");

    // Added back as the runbook says: a learner that catches up, then a voter.
    admin::add_learner(&operator, &admin_endpoints, *id, raft_addr)
        .await
        .expect("add the learner");
    admin::change_membership(&operator, &admin_endpoints, every_id.clone())
        .await
        .expect("make it a voter again");
    let leader = operator.leader_endpoint(&admin_endpoints).await.unwrap();
    let target = operator
        .status(&leader)
        .await
        .unwrap()
        .applied_index
        .expect("the leader has applied the membership change");
    let caught_up = eventually(Duration::from_secs(60), || async {
        let s = operator.status(endpoint).await.ok()?;
        (s.voters.contains(id) && s.applied_index >= Some(target)).then_some(s)
    })
    .await;
    assert_eq!(caught_up.voters.len(), 3, "{caught_up:?}");
}
