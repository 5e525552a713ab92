//! A member owns its groups' background tasks: stopping it stops every
//! task each group started, and `/metrics` says which run.

use std::time::Duration;

use once_raft_store::config::StoreConfig;
use once_raft_store::server::StoreServer;
use once_raft_store::tasks::TaskState;

const EVERY_GROUP_RUNS: [&str; 6] = [
    "group commit",
    "housekeeping",
    "election timer",
    "snapshot policy",
    "read index",
    "clock checks",
];

#[tokio::test]
async fn stopping_a_member_stops_every_task_each_of_its_groups_started() {
    let dir = tempfile::tempdir().unwrap();
    let local = "127.0.0.1:0".parse().unwrap();
    let mut config = StoreConfig::new(1, local, local, dir.path().to_path_buf());
    config.groups = vec!["eu-west".to_owned()];
    let server = StoreServer::start(config).await.expect("member starts");
    let groups = [server.tasks.clone(), server.groups["eu-west"].tasks.clone()];
    for tasks in &groups {
        let report = tasks.report();
        for name in EVERY_GROUP_RUNS {
            let task = report.iter().find(|t| t.name == name);
            assert_eq!(
                task.map(|t| t.state),
                Some(TaskState::Running),
                "{name}: {report:?}"
            );
        }
    }
    let metrics = reqwest::get(format!("http://{}/metrics", server.admin_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .contains(r#"raft_background_task_running{group="eu-west",task="election timer"} 1"#),
        "{metrics}"
    );

    tokio::time::timeout(Duration::from_secs(10), server.run_until(async {}))
        .await
        .expect("the member stops within 10 s")
        .expect("stopped by its signal");
    for tasks in &groups {
        let report = tasks.report();
        assert!(
            report.iter().all(|t| t.state == TaskState::Stopped),
            "every task is stopped and none failed: {report:?}"
        );
    }
}
