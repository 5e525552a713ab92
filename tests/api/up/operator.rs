//! The operator commands against `once up`, told only `--cluster
//! cluster.json` (decision 0082): `once store status` lists every Raft
//! group with its leader, as a table and as JSON Lines; `once events
//! dead-letters` reads every region's database; `once records` finds the
//! nodes, says "admin token" to a wrong token and "no such record" to a
//! missing one, both with a non-zero exit. Run where nothing else is,
//! `once events dead-letters` creates nothing and says the database does
//! not exist.

use std::path::Path;
use std::process::Output;

use once_test_support::ports::port_outside_ephemeral_range;

use super::Up;
use crate::helpers::ONCE;

fn once(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = std::process::Command::new(ONCE);
    command
        .args(args)
        .current_dir(dir)
        .env("RUST_LOG", "error")
        .env_remove("ONCE_ADMIN_TOKEN")
        .env_remove("ONCE_CLUSTER")
        .env_remove("ONCE_DATABASE_URL");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("run once")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn events_in_an_empty_folder_create_nothing_and_say_the_database_is_missing() {
    let empty = tempfile::tempdir().unwrap();
    // No cluster.json here: told neither where the database is nor the
    // cluster, the command says what to pass.
    let bare = once(empty.path(), &["events", "dead-letters"], &[]);
    assert!(!bare.status.success(), "{}", text(&bare));
    assert!(text(&bare).contains("--cluster"), "{}", text(&bare));

    // The database once-data/node.db an older default named: not created.
    let named = once(
        empty.path(),
        &[
            "events",
            "dead-letters",
            "--database-url",
            "once-data/node.db",
        ],
        &[],
    );
    assert!(!named.status.success(), "{}", text(&named));
    assert!(text(&named).contains("does not exist"), "{}", text(&named));
    let redrive = once(
        empty.path(),
        &["events", "redrive", "7", "--database-url", "node.db"],
        &[],
    );
    assert!(!redrive.status.success(), "{}", text(&redrive));
    let left: Vec<_> = std::fs::read_dir(empty.path()).unwrap().collect();
    assert!(left.is_empty(), "nothing created: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_commands_find_the_cluster_from_its_file_and_say_what_refused_them() {
    let root = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", port_outside_ephemeral_range(&["127.0.0.1"]));
    let up = Up::start(root.path(), &listen).await;
    let cluster = up.dir.join("cluster.json");
    let cluster = cluster.to_str().unwrap();
    // Run from elsewhere: nothing but the file says where the cluster is.
    let elsewhere = tempfile::tempdir().unwrap();
    let run = |args: &[&str], env: &[(&str, &str)]| once(elsewhere.path(), args, env);

    // Every group, each with a leader, as a table and as JSON.
    let mut groups = vec!["directory".to_owned()];
    groups.extend(
        up.cluster["store_groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_str().unwrap().to_owned()),
    );
    assert_eq!(groups.len(), 3, "{}", up.cluster["store_groups"]);
    let table = run(&["store", "status", "--cluster", cluster], &[]);
    assert!(table.status.success(), "{}", text(&table));
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.starts_with("group"), "{table}");
    for group in &groups {
        let rows = table
            .lines()
            .filter(|l| l.split_whitespace().next() == Some(group))
            .count();
        assert_eq!(rows, 3, "three members of {group}:\n{table}");
    }
    assert!(!table.contains("no leader"), "{table}");
    let json = run(&["store", "status", "--cluster", cluster, "--json"], &[]);
    assert!(json.status.success(), "{}", text(&json));
    // JSON Lines: each member's status of each group, its group added.
    let lines: Vec<serde_json::Value> = String::from_utf8(json.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 9, "{lines:?}");
    for group in &groups {
        let members: Vec<&serde_json::Value> = lines
            .iter()
            .filter(|l| l["group"] == group.as_str())
            .collect();
        assert_eq!(members.len(), 3, "{group}: {lines:?}");
        let leaders = members.iter().filter(|m| m["state"] == "Leader").count();
        assert_eq!(leaders, 1, "{group} has one leader: {members:?}");
        assert!(members.iter().all(|m| m["term"].is_u64()), "{members:?}");
    }

    // Without the operator's certificate the members refuse: the error
    // names the flags, and the exit is not 0.
    let endpoints: Vec<&str> = up.cluster["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["store"]["admin_url"].as_str().unwrap())
        .collect();
    let no_tls = run(
        &["store", "status", "--endpoints", &endpoints.join(",")],
        &[],
    );
    assert!(!no_tls.status.success(), "{}", text(&no_tls));
    assert!(text(&no_tls).contains("--tls-cert"), "{}", text(&no_tls));

    // Every region's database, read, none created.
    let letters = run(&["events", "dead-letters", "--cluster", cluster], &[]);
    assert!(letters.status.success(), "{}", text(&letters));
    assert!(
        String::from_utf8_lossy(&letters.stdout).starts_with("region"),
        "{}",
        text(&letters)
    );
    let redrive = run(&["events", "redrive", "1", "--cluster", cluster], &[]);
    assert!(!redrive.status.success(), "{}", text(&redrive));
    assert!(text(&redrive).contains("--region"), "{}", text(&redrive));

    // Records: the nodes are found; what refuses is named.
    let listed = run(&["records", "list", "--cluster", cluster], &[]);
    assert!(listed.status.success(), "{}", text(&listed));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&listed.stdout).unwrap();
    assert!(listed.is_empty(), "{listed:?}");
    let tenant = up.cluster["tenants"][1]["id"].as_str().unwrap();
    let missing = run(
        &[
            "records",
            "show",
            "--cluster",
            cluster,
            "--tenant",
            tenant,
            "--key",
            "never-sent",
        ],
        &[],
    );
    assert!(!missing.status.success(), "{}", text(&missing));
    assert!(
        text(&missing).contains("no such record"),
        "{}",
        text(&missing)
    );
    let wrong = run(
        &["records", "list", "--cluster", cluster],
        &[("ONCE_ADMIN_TOKEN", "nadm_Wr0ngTokenButStrongEnough7f3a9c")],
    );
    assert!(!wrong.status.success(), "{}", text(&wrong));
    assert!(text(&wrong).contains("admin token"), "{}", text(&wrong));
    assert!(!text(&wrong).contains("API key"), "{}", text(&wrong));

    let status = up.stop().await;
    assert!(status.success(), "{status:?}");
}
