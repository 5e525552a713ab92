//! Operational surface: probes, metrics, the OpenAPI document, shutdown,
//! migrations and config checks of the real binary.

use std::time::Duration;

use crate::helpers::*;
use crate::on_every_backend;

on_every_backend!(
    probes_answer_and_openapi_declares_the_contract,
    sigterm_drains_and_exits_cleanly
);

async fn probes_answer_and_openapi_declares_the_contract(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    for path in ["/healthz", "/readyz"] {
        let r = app
            .client
            .get(format!("{}{path}", app.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert!(r.headers().contains_key("x-trace-id"));
    }
    let doc: serde_json::Value = json_of(app.client.get(format!("{}/openapi.json", app.url))).await;
    let params = doc["paths"]["/payments"]["post"]["parameters"]
        .as_array()
        .unwrap();
    assert!(
        params.iter().any(|p| p["name"] == "Idempotency-Key"
            && p["in"] == "header"
            && p["required"] == true)
    );
    let codes: Vec<&str> = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for code in [
        "IDEMPOTENCY_KEY_REQUIRED",
        "IDEMPOTENCY_KEY_INVALID",
        "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST",
        "IDEMPOTENCY_REQUEST_IN_PROGRESS",
        "DUPLICATE_MERCHANT_REFERENCE",
        "VALIDATION_FAILED",
        "INSUFFICIENT_FUNDS",
        "UNAUTHORIZED",
        "PAYLOAD_TOO_LARGE",
    ] {
        assert!(codes.contains(&code), "{code} missing from {codes:?}");
    }
    let metrics = scrape(&app.client, &app.admin_url).await;
    for series in [
        "idempotency_replay_count_total",
        "idempotency_conflict_different_request_count_total",
        "idempotency_in_progress_age_max_seconds",
        "idempotency_expired_retry_count_total",
        "idempotency_unknown_state_count_total",
        "idempotency_unknown_state_records",
        "idempotency_takeover_count_total",
        "http_server_request_duration_seconds",
    ] {
        assert!(metrics.contains(series), "{series} missing from /metrics");
    }
    app.stop().await;
}

async fn sigterm_drains_and_exits_cleanly(backend: Backend) {
    let db = TestDb::new(backend).await;
    let sim = ProviderSim::start().await;
    let node = NodeProcess::start(&db, &["--provider-url", &sim.url], &[]).await;
    // A payment is mid-flight at the provider when SIGTERM arrives ...
    sim.arm("latency", 1, 1_000).await;
    let client = reqwest::Client::new();
    let in_flight = tokio::spawn(send(post(
        &client,
        &node.url,
        ACME_KEY,
        Some("k-term"),
        &payment_body("acc_1", "1.00", "t"),
    )));
    eventually(Duration::from_secs(10), || async {
        (sim.armed_faults().await == 0).then_some(())
    })
    .await;
    let status = node.terminate().await;
    // ... and the drain lets it finish before the process exits cleanly.
    let answer = in_flight.await.unwrap();
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    assert!(status.success(), "{status:?}");
    assert_eq!(db.count_records("COMPLETED").await, 1);
}

#[tokio::test]
async fn migrate_and_check_config_need_no_running_node() {
    let db = TestDb::new(Backend::Sqlite).await;
    let bin = ONCE;
    let migrate = tokio::process::Command::new(bin)
        .args(["migrate", "--database-url", &db.url])
        .output()
        .await
        .unwrap();
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM payments").await,
        0,
        "schema exists"
    );

    let check = tokio::process::Command::new(bin)
        .args([
            "node",
            "--check-config",
            "--listen",
            "127.0.0.1:1",
            "--database-url",
            "postgres://u:hunter2@db/x",
        ])
        .env("ONCE_API_KEYS", API_KEYS)
        .output()
        .await
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(
        out.contains("postgres://u:***@db/x")
            && !out.contains("hunter2")
            && !out.contains(ACME_KEY),
        "{out}"
    );

    let bad = tokio::process::Command::new(bin)
        .args(["node", "--check-config", "--response-schema", "9"])
        .env("ONCE_API_KEYS", API_KEYS)
        .output()
        .await
        .unwrap();
    assert_eq!(
        bad.status.code(),
        Some(64),
        "invalid config exits 64 before binding"
    );
    let no_keys = tokio::process::Command::new(bin)
        .args(["node", "--check-config"])
        .env_remove("ONCE_API_KEYS")
        .output()
        .await
        .unwrap();
    assert_eq!(no_keys.status.code(), Some(64));
}
