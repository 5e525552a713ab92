//! Log output: human-readable by default, JSON with `LOG_FORMAT=json`. In
//! JSON each line carries the fields of the span it was logged in — the
//! request span records `trace_id` and `span_id`, so every log line of a
//! request can be joined to its trace.

use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

pub fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,h2=warn,tonic=warn"))
}

pub fn layer<S>() -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let json = std::env::var("LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    // Colours only for a terminal: a log file or collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let base = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    if json {
        base.json()
            .with_current_span(true)
            .with_span_list(true)
            .boxed()
    } else {
        base.boxed()
    }
}
