//! OTLP exporters, configured only by the standard `OTEL_*` variables:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
//! `_METRICS_ENDPOINT`) turns export on; `OTEL_EXPORTER_OTLP_PROTOCOL` picks
//! `grpc` or `http/protobuf` (the default, as the specification says).

use std::time::Duration;

use opentelemetry_otlp::{MetricExporter, Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::metrics::periodic_reader_with_async_runtime::PeriodicReader;
use opentelemetry_sdk::runtime::Tokio;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;

#[derive(Debug, Clone)]
pub struct Settings {
    grpc: bool,
    traces_endpoint: Option<String>,
    metrics_endpoint: Option<String>,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Settings {
    /// `None` unless an endpoint is configured: then nothing exports.
    pub fn from_env() -> Option<Self> {
        let base = var("OTEL_EXPORTER_OTLP_ENDPOINT");
        let traces = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let metrics = var("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT");
        if base.is_none() && traces.is_none() && metrics.is_none() {
            return None;
        }
        let grpc =
            var("OTEL_EXPORTER_OTLP_PROTOCOL").is_some_and(|p| p.eq_ignore_ascii_case("grpc"));
        // For http/protobuf the base endpoint gets the signal's path; gRPC
        // takes the base as it is.
        let per_signal = |specific: Option<String>, path: &str| {
            specific.or_else(|| {
                base.as_ref().map(|b| {
                    if grpc {
                        b.clone()
                    } else {
                        format!("{}/{path}", b.trim_end_matches('/'))
                    }
                })
            })
        };
        Some(Self {
            grpc,
            traces_endpoint: per_signal(traces, "v1/traces"),
            metrics_endpoint: per_signal(metrics, "v1/metrics"),
        })
    }
}

pub fn span_processor(settings: &Settings) -> anyhow::Result<BatchSpanProcessor<Tokio>> {
    let builder = SpanExporter::builder();
    let exporter = match (&settings.traces_endpoint, settings.grpc) {
        (Some(endpoint), true) => builder
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(5))
            .build()?,
        (Some(endpoint), false) => builder
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(5))
            .build()?,
        (None, _) => anyhow::bail!("no traces endpoint"),
    };
    Ok(BatchSpanProcessor::builder(exporter, Tokio).build())
}

pub fn metric_reader(settings: &Settings) -> anyhow::Result<PeriodicReader<MetricExporter>> {
    let builder = MetricExporter::builder();
    let exporter = match (&settings.metrics_endpoint, settings.grpc) {
        (Some(endpoint), true) => builder.with_tonic().with_endpoint(endpoint).build()?,
        (Some(endpoint), false) => builder
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .build()?,
        (None, _) => anyhow::bail!("no metrics endpoint"),
    };
    Ok(PeriodicReader::builder(exporter, Tokio)
        .with_interval(Duration::from_secs(10))
        .build())
}
