//! Operational surface: probes, metrics, the OpenAPI document, shutdown,
//! migrations and config checks of the real binary.

use std::time::Duration;

use once_edge::{ApiError, ErrorCode};
use once_node::domain::{IdempotencyKey, Money, PaymentId};
use once_node::payments::headers;
use serde_json::{Value, json};

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
    document_states_the_contract(&doc);
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
    // How long ago raft-store's leader was heard, as this node's background
    // watch last had word (decision 0059): within the lease in raft mode,
    // no figure without a shared store.
    let heard = || {
        metric_sum(
            &app.client,
            &app.admin_url,
            "shared_store_leader_heard_seconds",
            "",
        )
    };
    if backend == Backend::Raft {
        let seconds = eventually(Duration::from_secs(10), || async {
            Some(heard().await).filter(|s| !s.is_nan())
        })
        .await;
        assert!((0.0..1.0).contains(&seconds), "{seconds} s");
    } else {
        assert!(heard().await.is_nan());
    }
    app.stop().await;
}

/// What `/openapi.json` must say for a generated client or a fuzzer
/// (schemathesis in `.ci/run`) to meet the server's real rules.
fn document_states_the_contract(doc: &serde_json::Value) {
    no_enum_repeats_a_value(doc, "#");
    let create = &doc["paths"]["/payments"]["post"];
    let fetch = &doc["paths"]["/payments/{id}"]["get"];
    let param = |operation: &serde_json::Value, name: &str| {
        operation["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} is a parameter"))
            .clone()
    };
    let key = param(create, "Idempotency-Key");
    assert_eq!(
        (&key["in"], &key["required"]),
        (&json!("header"), &json!(true))
    );
    // Bare or the IETF draft's sf-string (headers::idempotency_key).
    assert_eq!(key["schema"]["pattern"], headers::idempotency_key_pattern());
    assert_eq!(key["schema"]["minLength"], 1);
    assert_eq!(
        key["schema"]["maxLength"],
        headers::IDEMPOTENCY_KEY_MAX_FIELD_LEN
    );
    const { assert!(headers::IDEMPOTENCY_KEY_MAX_FIELD_LEN > IdempotencyKey::MAX_LEN) };
    let version = param(create, "Api-Version");
    assert_eq!(version["required"], false);
    assert_eq!(version["schema"]["$ref"], "#/components/schemas/ApiVersion");
    let versions = &doc["components"]["schemas"]["ApiVersion"];
    assert_eq!(versions["enum"], json!(["2026-11-01"]));
    assert_eq!(versions["x-enum-varnames"], json!(["V2026_11_01"]));
    assert_eq!(
        param(fetch, "id")["schema"]["pattern"],
        PaymentId::pattern()
    );

    // The body: every field constrained, the currency/amount pairing per exponent.
    let body = &doc["components"]["schemas"]["PaymentRequest"]["allOf"];
    let fields = &body[0]["properties"];
    assert_eq!(body[0]["additionalProperties"], false);
    assert_eq!(fields["accountId"]["pattern"], "^[A-Za-z0-9_-]{1,64}$");
    assert_eq!(fields["merchantReference"]["maxLength"], 128);
    // One `Channel` and one `PaymentStatus`, which every schema refers to.
    assert_eq!(
        fields["channel"]["oneOf"],
        json!([{"$ref": "#/components/schemas/Channel"}, {"type": "null"}])
    );
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["Channel"]["enum"], json!(["web", "mobile", "pos"]));
    assert_eq!(
        schemas["PaymentStatus"]["enum"],
        json!(["pending", "succeeded", "declined"])
    );
    for payment in ["PaymentV1", "PaymentV2"] {
        let fields = &schemas[payment]["properties"];
        assert_eq!(
            fields["status"]["$ref"],
            "#/components/schemas/PaymentStatus"
        );
        assert_eq!(fields["channel"]["$ref"], "#/components/schemas/Channel");
    }
    let pairs = body[1]["oneOf"].as_array().unwrap();
    assert_eq!(pairs.len(), Money::exponents().len());
    let eur = regex::Regex::new(
        pairs[1]["properties"]["currency"]["pattern"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let cents = regex::Regex::new(
        pairs[1]["properties"]["amount"]["pattern"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert!(eur.is_match("EUR") && eur.is_match("eur") && !eur.is_match("JPY"));
    assert!(cents.is_match("10.00") && !cents.is_match("10.001") && !cents.is_match("0"));

    // One ErrorCode enum: every code, and each one answered somewhere.
    let codes: Vec<&str> = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let every: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(codes, every, "ErrorCode::ALL lists every code, in order");
    for error in ApiError::examples() {
        assert!(codes.contains(&error.code().as_str()), "{error:?}");
    }
    // Every refusal is the one shared error model (a generator makes one
    // type of it, not one per answer), each code it answers shown by an
    // example.
    // Every operation, the webhook routes' too (their `501
    // NOT_IMPLEMENTED` in the raft mode is answered nowhere else).
    let operations: Vec<&Value> = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|path| path.as_object().unwrap().values())
        .collect();
    let mut answered = std::collections::HashSet::new();
    for operation in operations {
        for (status, response) in operation["responses"].as_object().unwrap() {
            if status.starts_with('4') && status != "431" || status.starts_with('5') {
                let content = &response["content"]["application/json"];
                assert_eq!(
                    content["schema"],
                    json!({"$ref": "#/components/schemas/ErrorBody"}),
                    "{status}"
                );
                let examples = content["examples"].as_object().unwrap();
                assert!(!examples.is_empty(), "{status} has examples");
                for example in examples.values() {
                    let code = example["value"]["errorCode"].as_str().unwrap();
                    answered.insert(code.to_owned());
                }
            }
        }
    }
    // Answered by the edge to no operation (docs/api.md), or by the router's
    // operator endpoints only.
    let elsewhere = ["NOT_FOUND", "METHOD_NOT_ALLOWED", "REGION_NOT_HEALTHY"];
    for code in codes {
        assert!(
            answered.contains(code) || elsewhere.contains(&code),
            "{code} is in no operation's answers"
        );
    }
    for status in [
        "201", "202", "400", "401", "402", "409", "413", "422", "429", "503",
    ] {
        assert!(
            create["responses"][status].is_object(),
            "POST /payments {status}"
        );
    }
    for status in ["200", "401", "404"] {
        assert!(
            fetch["responses"][status].is_object(),
            "GET /payments/{{id}} {status}"
        );
    }
    assert_eq!(
        create["responses"]["201"]["headers"]["Location"]["required"],
        true
    );
    assert_eq!(
        create["responses"]["429"]["headers"]["Retry-After"]["required"],
        true
    );
    assert!(create["responses"]["201"]["headers"]["Idempotent-Replayed"].is_object());
    assert!(create["responses"]["409"]["headers"]["Retry-After"]["required"].is_null());

    // Links from the answers that name a payment to reading it.
    assert_eq!(fetch["operationId"], "getPayment");
    for (status, pointer) in [("201", "/id"), ("202", "/paymentId"), ("402", "/paymentId")] {
        let link = &create["responses"][status]["links"]["GetPaymentById"];
        assert_eq!(link["operationId"], "getPayment", "{status}");
        assert_eq!(
            link["parameters"]["id"],
            format!("$response.body#{pointer}"),
            "{status}"
        );
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert_eq!(create["security"], json!([{"bearer": []}]));
}

/// Every `enum` anywhere in the document lists each value once: a generator
/// names a member after its value, and `openapi-python-client` stops on the
/// whole document at a repeated one (the 503 `errorCode` enum once listed
/// `SERVICE_UNAVAILABLE` twice, one entry per message).
fn no_enum_repeats_a_value(node: &serde_json::Value, at: &str) {
    match node {
        serde_json::Value::Object(fields) => {
            for (name, value) in fields {
                if let ("enum", Some(values)) = (name.as_str(), value.as_array()) {
                    for (i, v) in values.iter().enumerate() {
                        assert!(
                            !values[..i].contains(v),
                            "{at}/enum lists {v} twice: {values:?}"
                        );
                    }
                }
                no_enum_repeats_a_value(
                    value,
                    &format!("{at}/{}", name.replace('~', "~0").replace('/', "~1")),
                );
            }
        }
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                no_enum_repeats_a_value(item, &format!("{at}/{i}"));
            }
        }
        _ => {}
    }
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
        .env("ONCE_DATA_KEYS", test_data_keys())
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

    // PostgreSQL without a data key file: refused before binding (every
    // node of the database must seal with the same keys).
    let keyless = tokio::process::Command::new(bin)
        .args([
            "node",
            "--check-config",
            "--database-url",
            "postgres://u:hunter2@db/x",
        ])
        .env("ONCE_API_KEYS", API_KEYS)
        .env_remove("ONCE_DATA_KEYS")
        .output()
        .await
        .unwrap();
    assert_eq!(keyless.status.code(), Some(64));
    assert!(
        String::from_utf8_lossy(&keyless.stderr).contains("--data-keys"),
        "{}",
        String::from_utf8_lossy(&keyless.stderr)
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
