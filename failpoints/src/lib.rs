//! Crash injection for the recovery tests.
//!
//! Built only with the `failpoints` feature (CI's test build); in every
//! other build [`crash_point`] compiles to nothing. With the feature on,
//! `FAILPOINTS="after_claim=return"` makes the process abort — as abruptly
//! as SIGKILL, no destructors, no flush — when it reaches that point.
//!
//! Points, in execution order: `after_claim`, `after_provider_request_sent`,
//! `after_provider_charge`, `after_finish` (in the raft mode, where the
//! answer goes out before the finish, `before_finish_after_answer` is a
//! [`hold_point`] and `after_finish` comes after the answer;
//! `after_record_finished` falls between the record's finish and the row's); `after_batch_commit` (the `sql`
//! mode's group commit, between a batch's commit and its answers); on the event path
//! `after_publish`, `after_consume`, `after_email_send` (`once-events`).
//!
//! This crate owns only the crash points, so the node and the event path
//! share one definition. The `cfg` is evaluated here: a crate that calls
//! [`crash_point`] forwards its own `failpoints` feature to this crate's, up
//! to the root package's, which `cargo test --features failpoints` turns on.

/// Aborts the process here if the failpoint `name` is armed.
#[inline]
pub fn crash_point(name: &str) {
    #[cfg(feature = "failpoints")]
    if fail::eval(name, |_| ()).is_some() {
        eprintln!("failpoint {name}: aborting the process");
        std::process::abort();
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

/// Parks the calling task here for good if the failpoint `name` is armed
/// (`FAILPOINTS="name=return"`): the process goes on serving, and this one
/// piece of work never goes further, until the test kills the process. It
/// holds the task, not its thread, so nothing else waits behind it. Armed
/// with `sleep(MS)` instead, it delays the work that long and lets it go on.
pub async fn hold_point(name: &str) {
    #[cfg(feature = "failpoints")]
    if fail::eval(name, |_| ()).is_some() {
        eprintln!("failpoint {name}: holding this task until the process dies");
        std::future::pending::<()>().await;
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

/// Reads `FAILPOINTS` once at startup; a no-op without the feature.
pub fn arm_from_env() {
    #[cfg(feature = "failpoints")]
    std::mem::forget(fail::FailScenario::setup());
}
