//! A member whose Raft core stops — a fatal storage error, a panic inside
//! openraft — stops serving and says so, instead of answering status from
//! its last metrics (which would go on saying it leads). `once store` turns
//! the error into a non-zero exit, so a supervisor restarts it from disk.

use std::time::Duration;

use once_raft_store::config::StoreConfig;
use once_raft_store::server::{CoreStopped, StoreServer};

#[tokio::test]
async fn a_member_whose_raft_core_stops_stops_serving_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let local = "127.0.0.1:0".parse().unwrap();
    let config = StoreConfig::new(1, local, local, dir.path().to_path_buf());
    let server = StoreServer::start(config).await.expect("member starts");
    let raft = server.raft.clone();
    let status = format!("http://{}/api/status", server.api_addr);
    let http = reqwest::Client::new();
    assert!(
        http.get(&status)
            .send()
            .await
            .unwrap()
            .status()
            .is_success()
    );

    let running = tokio::spawn(server.run_until(std::future::pending()));
    // The core ends without the member being told to stop.
    raft.shutdown().await.expect("core shut down");
    let ended = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the member notices within 10 s")
        .expect("task");
    assert!(matches!(ended, Err(CoreStopped { id: 1 })), "{ended:?}");
    // Its listeners drain and close: status is no longer answered.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if http.get(&status).send().await.is_err() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "status still answered after the core stopped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
