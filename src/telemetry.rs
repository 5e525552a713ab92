//! Logging setup shared by every role: human-readable by default, JSON with
//! `LOG_FORMAT=json`; the level comes from `RUST_LOG` (default `info`).

use tracing_subscriber::EnvFilter;

pub fn init_logging() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var("LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json")) {
        builder.json().with_current_span(true).init();
    } else {
        builder.init();
    }
}
