//! What surrounds `once up`'s cluster, attacked as a local user or a web
//! page would (issue 48), on a real `once up`: its control endpoint refuses
//! a cross-site `text/plain` POST, a token-less one, a foreign `Host` and a
//! body that is not JSON, and restarts nothing; the drill's client, with
//! the token from `cluster.json`, restarts a node. After it has served
//! payments, no file under its directory is readable by anyone but its
//! owner, though `once up` was started under umask 022. Every certificate
//! it made expires within its configured lifetime (a minute, here) and is
//! issued again before it expires, and the processes present the new one
//! without a restart. A role handed a key file others may read exits 64
//! before it binds.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use once_drill::control::{Control, RestartOptions};
use once_test_support::ports::port_outside_ephemeral_range;
use once_test_support::process::alive;

use super::Up;
use crate::helpers::{Answer, ONCE, eventually, payment_body, post};

/// The leaves' lifetime and renewal margin this test runs `once up` with:
/// renewed every 20 s or so, each well before it expires.
const LIFETIME: Duration = Duration::from_secs(60);
const RENEW_BEFORE: Duration = Duration::from_secs(40);

/// Every leaf certificate `once up` keeps in `dir/tls` (not the CA), and
/// when it expires.
fn leaf_expiries(dir: &Path) -> BTreeMap<PathBuf, SystemTime> {
    std::fs::read_dir(dir.join("tls"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.ends_with(".pem") && !name.ends_with("-key.pem") && name != "ca.pem"
        })
        .map(|p| {
            let expiry = once_tls::Validity::of_file(&p).unwrap().not_after;
            (p, expiry)
        })
        .collect()
}

/// The certificate the store member at `api_url` presents now, as a new
/// connection sees it.
async fn served_expiry(cluster: &serde_json::Value, api_url: &str) -> Option<SystemTime> {
    let client = super::operator_tls(cluster)
        .http_client()
        .tls_info(true)
        .build()
        .unwrap();
    let response = client
        .get(format!("{api_url}/api/status"))
        .send()
        .await
        .ok()?;
    let info = response.extensions().get::<reqwest::tls::TlsInfo>()?;
    Some(
        once_tls::Validity::of_der(info.peer_certificate()?)
            .ok()?
            .not_after,
    )
}

/// The node `once up` runs in `cluster`'s last region, and its pid now.
fn node_pid(dir: &Path) -> (String, i32) {
    let cluster: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).unwrap()).unwrap();
    let region = cluster["regions"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    (
        format!("node-{}", region["name"].as_str().unwrap()),
        region["node"]["pid"].as_i64().unwrap() as i32,
    )
}

/// Every path under `dir` whose mode lets its group or others in.
fn open_to_others(dir: &Path) -> Vec<String> {
    let mut open = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(path) = pending.pop() {
        let metadata = std::fs::symlink_metadata(&path).unwrap();
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            open.push(format!("{} {mode:04o}", path.display()));
        }
        if metadata.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
    open
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_up_admits_only_its_drills_and_keeps_its_files_to_its_owner() {
    let root = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", port_outside_ephemeral_range(&["127.0.0.1"]));
    // The umask most machines have: files born 0644 unless `once up` sees
    // to it.
    let previous = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let lifetime = format!("{}s", LIFETIME.as_secs());
    let renew_before = format!("{}s", RENEW_BEFORE.as_secs());
    let up = Up::start_with(
        root.path(),
        &listen,
        &[
            "--cert-lifetime",
            &lifetime,
            "--cert-renew-before",
            &renew_before,
        ],
    )
    .await;
    nix::sys::stat::umask(previous);
    let dir = up.dir.clone();
    let control_url = up.cluster["control"]["url"].as_str().unwrap().to_owned();
    let token = up.cluster["control"]["token"].as_str().unwrap().to_owned();
    let (node, pid) = node_pid(&dir);
    let restart = format!("{control_url}/processes/{node}/restart");
    let http = reqwest::Client::new();

    // A web page's "simple" cross-site request: text/plain, its own Origin,
    // no token (a browser cannot add one without a preflight).
    let cross_site = http
        .post(&restart)
        .header("origin", "https://attacker.example")
        .header("content-type", "text/plain")
        .body(r#"{"stop": "kill"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(cross_site.status(), 403);
    // A local user without the token, sending what the drill sends.
    let tokenless = http
        .post(&restart)
        .json(&serde_json::json!({"stop": "kill"}))
        .send()
        .await
        .unwrap();
    assert_eq!(tokenless.status(), 401);
    assert_eq!(tokenless.headers()["www-authenticate"], "Bearer");
    // A DNS-rebound page: the token cannot be had, but the Host is its own.
    let rebound = http
        .post(&restart)
        .header("host", "attacker.example")
        .bearer_auth(&token)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 421);
    // Even with the token: a body that is not JSON.
    let plain = http
        .post(&restart)
        .bearer_auth(&token)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 415);
    let region_restart = http
        .post(format!("{control_url}/regions/eu-west/restart"))
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(region_restart.status(), 401);
    assert!(alive(pid), "nothing was restarted");
    assert_eq!(node_pid(&dir).1, pid, "cluster.json names the same node");

    // The drill's client, with cluster.json's token, gets in.
    let control =
        Control::new(&serde_json::from_value(up.cluster["control"].clone()).unwrap()).unwrap();
    let restarted = control
        .restart_process(&node, &RestartOptions::default())
        .await
        .unwrap();
    assert_eq!(restarted.previous_pid as i32, pid);
    assert_ne!(restarted.pid as i32, pid);
    assert_eq!(node_pid(&dir).1, restarted.pid as i32);

    // Payments served in every region: databases, store logs and process
    // logs written; none of it is anyone else's to read.
    let router = up.cluster["router"]["url"].as_str().unwrap().to_owned();
    for tenant in up.cluster["tenants"].as_array().unwrap() {
        let key = tenant["api_key"].as_str().unwrap();
        let body = payment_body("acc_1", "3.00", "order-perimeter");
        let answer = Answer::of(
            post(&http, &router, key, Some("k-perimeter"), &body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            answer.status,
            201,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
    }
    for served in ["logs", "provider-ledger.jsonl", "cluster.json", "tls"] {
        assert!(dir.join(served).exists(), "{served}");
    }
    assert_eq!(open_to_others(&dir), Vec::<String>::new());

    // Every certificate expires within its lifetime from now (it was made
    // earlier), the CA within five years.
    let leaves = leaf_expiries(&dir.clone());
    assert_eq!(
        leaves.len(),
        3 * 2 + 2,
        "a store member and a node per region, router, operator"
    );
    for (leaf, expiry) in &leaves {
        assert!(
            *expiry <= SystemTime::now() + LIFETIME,
            "{} outlives its lifetime",
            leaf.display()
        );
    }
    let ca = once_tls::Validity::of_file(&dir.join("tls/ca.pem")).unwrap();
    assert!(ca.not_after <= SystemTime::now() + Duration::from_secs(5 * 365 * 24 * 3600));
    // Each one issued again before it expired (seen while the old one was
    // still valid), and a store member presenting the new one without a
    // restart.
    let store_api = up.cluster["regions"][1]["store"]["api_url"]
        .as_str()
        .unwrap()
        .to_owned();
    let store_cert = dir.join(format!(
        "tls/store-{}.pem",
        up.cluster["regions"][1]["name"].as_str().unwrap()
    ));
    let store_pid = up.cluster["regions"][1]["store"]["pid"].as_i64().unwrap() as i32;
    eventually(LIFETIME * 2, || async {
        let now = SystemTime::now();
        let renewed = leaf_expiries(&dir);
        for (leaf, first) in &leaves {
            let again = renewed[leaf];
            if again == *first {
                assert!(now < *first, "{} expired without a renewal", leaf.display());
                return None;
            }
            assert!(
                again > *first && again <= now + LIFETIME,
                "{}",
                leaf.display()
            );
        }
        let served = served_expiry(&up.cluster, &store_api).await?;
        (served > leaves[&store_cert]).then_some(())
    })
    .await;
    assert!(
        alive(store_pid),
        "the member reloaded its files, it was not restarted"
    );
    // Paid through the renewed certificates: router → node → store.
    let tenant = &up.cluster["tenants"][0];
    let body = payment_body("acc_1", "4.00", "order-renewed");
    let answer = Answer::of(
        post(
            &http,
            &router,
            tenant["api_key"].as_str().unwrap(),
            Some("k-renewed"),
            &body,
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );

    let status = up.stop().await;
    assert!(status.success(), "{status:?}");
}

/// A node handed a data key file, or a router a TLS key, that other users
/// may read: exit 64, naming the file and the flag, before binding.
#[tokio::test]
async fn a_role_refuses_key_files_other_users_may_read() {
    let dir = tempfile::tempdir().unwrap();
    let data_keys = dir.path().join("data-keys");
    once_seal::KeyRing::generate()
        .create_file(&data_keys)
        .unwrap();
    let ca = once_tls::LocalCa::create(&dir.path().join("ca"), "key mode test CA").unwrap();
    let router_files = once_tls::TlsFiles::named(dir.path(), "router");
    ca.issue_to(
        &once_tls::Identity::new("eu-west", once_tls::Role::Router).unwrap(),
        &[],
        &[],
        &router_files,
    )
    .unwrap();
    let check = |args: Vec<String>| async move {
        tokio::process::Command::new(ONCE)
            .args(args)
            .arg("--check-config")
            .env(
                "ONCE_API_KEYS",
                "acme:demo:sk_0123456789abcdef0123456789abcdef",
            )
            .output()
            .await
            .unwrap()
    };
    let node = || {
        vec![
            "node".to_owned(),
            "--data-keys".to_owned(),
            data_keys.display().to_string(),
        ]
    };
    let mut router = vec![
        "router".to_owned(),
        "--region".to_owned(),
        "eu-west".to_owned(),
        "--store-endpoints".to_owned(),
        "https://127.0.0.1:1".to_owned(),
        "--nodes".to_owned(),
        "eu-west=https://127.0.0.1:9".to_owned(),
    ];
    router.extend(router_files.flags());
    let router = || router.clone();

    // Owner only: accepted.
    for args in [node(), router()] {
        let ok = check(args.clone()).await;
        assert!(
            ok.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&ok.stderr)
        );
    }
    for (path, flag, args) in [
        (&data_keys, "--data-keys", node()),
        (&router_files.key, "--tls-key", router()),
    ] {
        for mode in [0o644, 0o666] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
            let refused = check(args.clone()).await;
            let stderr = String::from_utf8_lossy(&refused.stderr);
            assert_eq!(refused.status.code(), Some(64), "{flag} {mode:o}: {stderr}");
            assert!(
                stderr.contains(flag) && stderr.contains(&format!("{mode:04o}")),
                "{stderr}"
            );
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}
