//! Every request is debuggable from its trace: one trace across the node
//! and the provider, continuing the caller's `traceparent`; a replay links
//! to the execution it replays; nothing is exported — or even dialled —
//! when no OTLP endpoint is configured.

use std::collections::HashMap;
use std::time::Duration;

use fake_opentelemetry_collector::{ExportedSpan, FakeCollectorServer};
use futures::FutureExt;

use crate::helpers::*;

/// An attribute's value; the fake collector keeps the protobuf's debug form
/// (`Some(AnyValue { value: Some(StringValue("x")) })`).
fn attr(span: &ExportedSpan, key: &str) -> String {
    let raw = span
        .attributes
        .get(key)
        .map(String::as_str)
        .unwrap_or_default();
    for kind in ["StringValue(\"", "IntValue("] {
        if let Some(start) = raw.find(kind) {
            let rest = &raw[start + kind.len()..];
            let end = rest.find(['"', ')']).unwrap_or(rest.len());
            return rest[..end].to_owned();
        }
    }
    raw.to_owned()
}

fn header(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_payment_is_one_trace_from_the_caller_through_node_and_provider() {
    let mut collector = FakeCollectorServer::start()
        .await
        .expect("collector starts");
    let endpoint = collector.endpoint();
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ];
    let db = TestDb::new(Backend::Sqlite).await;
    let mut sim = ProviderSim::start_with("127.0.0.1:0", &otel).await;
    let node = NodeProcess::start(&db, &["--provider-url", &sim.url], &otel).await;

    // The caller's own trace: the node must continue it.
    let trace_id = format!("{:032x}", rand::random::<u128>() | 1);
    let caller_span = format!("{:016x}", rand::random::<u64>() | 1);
    let client = reqwest::Client::new();
    let body = payment_body("acc_1", "12.00", "traced-1");
    let first = post(&client, &node.url, ACME_KEY, Some("k-traced"), &body)
        .header("traceparent", format!("00-{trace_id}-{caller_span}-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    assert_eq!(header(&first, "x-trace-id"), trace_id);
    assert!(header(&first, "traceresponse").starts_with(&format!("00-{trace_id}-")));

    let replay = post(&client, &node.url, ACME_KEY, Some("k-traced"), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(header(&replay, "idempotent-replayed"), "true");
    assert_eq!(
        header(&replay, "idempotent-original-trace-id"),
        trace_id,
        "the replay names the original trace"
    );
    let replay_trace = header(&replay, "x-trace-id");
    assert_ne!(
        replay_trace, trace_id,
        "a replay is its own request, with its own trace"
    );

    // The event path runs too: wait for the ledger consumer's effect.
    eventually(Duration::from_secs(20), || async {
        (db.count("SELECT COUNT(*) FROM ledger_entries").await == 1).then_some(())
    })
    .await;

    // Clean shutdowns flush what is batched.
    assert!(node.terminate().await.success());
    assert!(sim.process.terminate().await.success());

    let spans = collector.exported_spans(8, Duration::from_secs(20)).await;
    let by_id: HashMap<&str, &ExportedSpan> =
        spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let named = |name: &str, trace: &str| -> &ExportedSpan {
        spans
            .iter()
            .find(|s| s.name == name && s.trace_id == trace)
            .unwrap_or_else(|| {
                panic!(
                    "no span {name:?} in trace {trace}: {:#?}",
                    spans
                        .iter()
                        .map(|s| (&s.name, &s.trace_id))
                        .collect::<Vec<_>>()
                )
            })
    };
    let server = named("POST /payments", &trace_id);
    assert_eq!(
        server.parent_span_id, caller_span,
        "the node's server span is a child of the caller's span"
    );
    assert_eq!(server.kind, "SPAN_KIND_SERVER");
    assert_eq!(attr(server, "idempotency.outcome"), "executed");
    assert_eq!(attr(server, "tenant"), "acme");
    assert_eq!(attr(server, "http.route"), "/payments");
    assert_eq!(attr(server, "http.response.status_code"), "201");
    assert!(
        !server.attributes.values().any(|v| v.contains(ACME_KEY)),
        "no API key in attributes"
    );

    // Every node span of the execution descends from the server span.
    let descends_from = |span: &ExportedSpan, ancestor: &str| {
        let mut current = span;
        for _ in 0..16 {
            if current.parent_span_id == ancestor {
                return true;
            }
            match by_id.get(current.parent_span_id.as_str()) {
                Some(parent) => current = parent,
                None => return false,
            }
        }
        false
    };
    for name in [
        "create payment",
        "claim the key",
        "charge at the provider",
        "finish the operation",
    ] {
        let span = named(name, &trace_id);
        assert!(
            descends_from(span, &server.span_id),
            "{name} is under the server span"
        );
    }
    // A new payment is claimed at PROVIDER_REQUEST_SENT: no recovery point
    // is written between the claim and the finish.
    assert!(
        !spans
            .iter()
            .any(|s| s.name == "record a recovery point" && s.trace_id == trace_id),
        "a new payment writes no separate recovery point"
    );
    let provider_call = named("charge at the provider", &trace_id);
    assert_eq!(provider_call.kind, "SPAN_KIND_CLIENT");
    // The provider simulator, another process, continued the same trace.
    let provider_server = named("POST /charges", &trace_id);
    assert_eq!(
        provider_server.parent_span_id, provider_call.span_id,
        "the provider's span is a child of the node's call"
    );

    // The consumer continued the trace of the request that wrote the event.
    let consumed = spans
        .iter()
        .find(|s| s.name == "consume an event" && s.trace_id == trace_id)
        .expect("the event's consumer span joins the payment's trace");
    assert_eq!(consumed.kind, "SPAN_KIND_CONSUMER");

    // Metrics went out over OTLP too, under DESIGN's names.
    let exported = collector.exported_metrics(1, Duration::from_secs(20)).await;
    let names: Vec<&str> = exported
        .iter()
        .flat_map(|e| e.metrics.iter().map(|m| m.name.as_str()))
        .collect();
    for name in [
        "idempotency.replay.count",
        "idempotency.conflict.different_request.count",
        "http.server.request.duration",
    ] {
        assert!(names.contains(&name), "{name} not exported: {names:?}");
    }

    let replay_server = named("POST /payments", &replay_trace);
    assert_eq!(attr(replay_server, "idempotency.outcome"), "replayed");
    assert!(
        replay_server
            .links
            .iter()
            .any(|l| l.trace_id == trace_id && l.span_id == server.span_id),
        "the replay links to the original execution: {:?}",
        replay_server.links
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_nothing_connects_anywhere() {
    // Stand where a default OTLP exporter would dial (gRPC 4317, HTTP 4318).
    let mut listeners = Vec::new();
    for port in [4317, 4318] {
        match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(l) => listeners.push(l),
            Err(e) => eprintln!("port {port} is taken ({e}); checking the other"),
        }
    }
    assert!(
        !listeners.is_empty(),
        "could not watch either default OTLP port"
    );
    let db = TestDb::new(Backend::Sqlite).await;
    let sim = ProviderSim::start().await;
    let node = NodeProcess::start(&db, &["--provider-url", &sim.url], &[]).await;
    let client = reqwest::Client::new();
    let answer = send(post(
        &client,
        &node.url,
        ACME_KEY,
        Some("k-dark"),
        &payment_body("acc_1", "1.00", "dark"),
    ))
    .await;
    assert_eq!(answer.status, 201);
    // A clean shutdown is when a configured exporter would flush at the latest.
    assert!(node.terminate().await.success());
    for listener in &listeners {
        assert!(
            listener.accept().now_or_never().is_none(),
            "something dialled {:?}",
            listener.local_addr()
        );
    }
}
