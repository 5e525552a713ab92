//! A local OTLP/gRPC receiver for benchmarks: accepts spans and metrics,
//! counts them, keeps nothing. `cargo run --release --example otlp_sink`
//! prints `listening on http://ADDR` and, on Ctrl-C, the totals.

use std::time::Duration;

use fake_opentelemetry_collector::FakeCollectorServer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut collector = FakeCollectorServer::start().await?;
    println!("listening on {}", collector.endpoint());
    let mut spans = 0usize;
    let mut metric_batches = 0usize;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            received = collector.exported_spans(1, Duration::from_millis(200)) => spans += received.len(),
        }
        metric_batches += collector.exported_metrics(0, Duration::ZERO).await.len();
    }
    eprintln!("received {spans} spans and {metric_batches} metric batches");
    Ok(())
}
