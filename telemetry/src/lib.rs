//! Telemetry shared by every `once` role: logs, traces and metrics, set up
//! the same way whether the process is a node, a router, a store member or
//! the provider simulator.
//!
//! # Layout
//!
//! - [`init`]: installs the `tracing` subscriber — human-readable logs, or
//!   JSON with `LOG_FORMAT=json`; the OpenTelemetry layer; the W3C
//!   propagator — and, when `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces /
//!   metrics specific variables) is set, OTLP exporters chosen by
//!   `OTEL_EXPORTER_OTLP_PROTOCOL` (`grpc`, or `http/protobuf`, the default).
//!   Without an endpoint nothing is exported and nothing connects anywhere;
//!   trace ids are still minted and propagated so every response carries one.
//! - [`context`]: W3C trace-context helpers — extract a parent from incoming
//!   headers, inject the current span into outgoing ones, read the current
//!   trace id, parse a stored `traceparent` back into a span context.
//!
//! ```text
//! router ─traceparent─► node ─traceparent─► raft-store, provider
//!                          └─ outbox row carries traceparent ─► broker ─► consumers
//! ```
//!
//! Export never blocks a request: spans are batched and sent by a background
//! task, and a collector that is down only costs dropped spans. [`Telemetry`]
//! flushes on shutdown.

pub mod context;
mod export;
mod logging;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Which process this is, for the resource attributes.
#[derive(Debug, Clone)]
pub struct Role {
    /// `service.name`: `once-node`, `once-router`, `once-store`, …
    pub service: &'static str,
    pub region: Option<String>,
}

/// Keeps the providers alive; flushes and shuts them down on drop.
#[derive(Debug)]
pub struct Telemetry {
    tracer_provider: SdkTracerProvider,
    meter_provider: Option<SdkMeterProvider>,
    pub exporting: bool,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        // Flush what is batched; a collector that is gone must not hang
        // the shutdown, and the SDK bounds these calls itself.
        let _ = self.tracer_provider.force_flush();
        let _ = self.tracer_provider.shutdown();
        if let Some(meters) = self.meter_provider.take() {
            let _ = meters.force_flush();
            let _ = meters.shutdown();
        }
    }
}

fn resource(role: &Role) -> Resource {
    let mut attributes = vec![
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("service.instance.id", uuid::Uuid::now_v7().to_string()),
    ];
    if let Some(region) = &role.region {
        attributes.push(KeyValue::new("cloud.region", region.clone()));
    }
    Resource::builder()
        .with_service_name(role.service)
        .with_attributes(attributes)
        .build()
}

static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process exports over OTLP (so metric twins are worth keeping).
pub fn exporting() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Installs logging, tracing and (when configured) OTLP export for `role`.
/// Call once, inside the Tokio runtime, before serving anything.
pub fn init(role: &Role) -> anyhow::Result<Telemetry> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let resource = resource(role);
    let export = export::Settings::from_env();

    let mut tracer_builder = SdkTracerProvider::builder().with_resource(resource.clone());
    match export.as_ref().map(export::span_processor).transpose()? {
        // The sampler comes from OTEL_TRACES_SAMPLER (the SDK reads it).
        Some(processor) => tracer_builder = tracer_builder.with_span_processor(processor),
        // Nothing to export to: mint and propagate ids, record nothing.
        None => tracer_builder = tracer_builder.with_sampler(Sampler::AlwaysOff),
    }
    let tracer_provider = tracer_builder.build();
    let tracer = tracer_provider.tracer(role.service);

    let meter_provider = match &export {
        Some(settings) => {
            let reader = export::metric_reader(settings)?;
            let provider = SdkMeterProvider::builder()
                .with_resource(resource)
                .with_reader(reader)
                .build();
            opentelemetry::global::set_meter_provider(provider.clone());
            Some(provider)
        }
        None => None,
    };

    // Each layer filters for itself: `RUST_LOG=warn` quiets the logs but must
    // not switch off the INFO spans that traces and trace ids are made of.
    //
    // Every request makes its spans whether or not they are exported (the
    // trace id is minted anyway), so the layer does no per-span work that
    // nobody reads: no busy/idle timing (a clock read on every poll), no
    // OpenTelemetry context activated on every poll (ids are read from the
    // span itself, `context::current_traceparent`), no thread or source
    // location attributes (spans are named after what they do).
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_error_records_to_exceptions(true)
        .with_tracked_inactivity(false)
        .with_context_activation(false)
        .with_threads(false)
        .with_location(false)
        .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
    tracing_subscriber::registry()
        .with(logging::layer().with_filter(logging::filter()))
        .with(spans)
        .try_init()
        .map_err(|e| anyhow::anyhow!("installing the tracing subscriber: {e}"))?;

    EXPORTING.store(export.is_some(), std::sync::atomic::Ordering::Relaxed);
    Ok(Telemetry {
        tracer_provider,
        meter_provider,
        exporting: export.is_some(),
    })
}
