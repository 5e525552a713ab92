//! Services from outside the workspace that some tests need: PostgreSQL at
//! `DATABASE_URL`, NATS JetStream at `NATS_URL`, and whatever else a suite
//! checks for itself (libfaketime). Without one, its tests are skipped
//! locally and fail under CI (`CI` set at all), so CI can never go green
//! without exercising them.

use std::time::Duration;

/// `present`, or else: fails the test under CI with `ci_message`, and
/// locally prints `skip_message` and returns false (the caller skips).
pub fn present_or_skipped(present: bool, ci_message: &str, skip_message: &str) -> bool {
    if !present {
        assert!(std::env::var("CI").is_err(), "{ci_message}");
        eprintln!("{skip_message}");
    }
    present
}

/// True when PostgreSQL tests can run (`DATABASE_URL` is set).
pub fn postgres_available() -> bool {
    present_or_skipped(
        std::env::var("DATABASE_URL").is_ok(),
        "CI must set DATABASE_URL so the PostgreSQL scenarios run",
        "DATABASE_URL unset: skipping the PostgreSQL variant",
    )
}

/// `NATS_URL`, by default `nats://127.0.0.1:4222`.
pub fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// True when a NATS server accepts a connection at [`nats_url`].
pub async fn nats_available() -> bool {
    let url = nats_url();
    let addr = url.trim_start_matches("nats://").to_owned();
    let reachable = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect(addr.as_str()),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    present_or_skipped(
        reachable,
        &format!("CI must run NATS at {url} so the NATS scenarios run"),
        &format!("no NATS at {url}: skipping the NATS variant"),
    )
}
