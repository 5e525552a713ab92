//! When a role stops: SIGTERM, Ctrl-C, or its supervisor's lifeline.

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    // A process started by a supervisor that may die without a word
    // (`once up` killed outright) stops when the supervisor's end of its
    // stdin closes, instead of running on as an orphan.
    let lifeline = async {
        if std::env::var(LIFELINE_ENV).as_deref() == Ok("stdin") {
            lifeline_closed().await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    // Each way out says so: a process that ended on a signal nobody meant
    // for it left nothing in its log (RELIABILITY.md finding 19), and
    // only SIGKILL should stop a process without a word.
    tokio::select! {
        _ = ctrl_c => tracing::warn!("SIGINT (Ctrl-C): shutting down"),
        _ = terminate => tracing::warn!("SIGTERM: shutting down"),
        // `once up` closes the pipe when it stops a child too (tokio's
        // `Child::wait` drops stdin first), often before its SIGTERM lands.
        _ = lifeline => tracing::warn!("stdin closed (the supervising process stops this one, or is gone): shutting down"),
    }
}

/// `ONCE_LIFELINE=stdin`: [`shutdown_signal`] also fires when stdin reaches
/// its end. Set by `once up` for its children, whose stdin is a pipe it
/// holds open for as long as it lives.
pub const LIFELINE_ENV: &str = "ONCE_LIFELINE";

/// Resolves when stdin reaches its end (or fails, which means the same).
/// The blocking read runs on a plain thread of its own, not tokio's
/// blocking pool: a runtime waits for its blocking tasks when it shuts
/// down, and a read that never returns would keep a SIGTERM'd process alive.
async fn lifeline_closed() {
    use std::io::Read;
    let (closed, on_close) = tokio::sync::oneshot::channel::<()>();
    let reader = std::thread::Builder::new()
        .name("lifeline".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 64];
            while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
            let _ = closed.send(());
        });
    match reader {
        Ok(_) => {
            let _ = on_close.await;
        }
        // No thread, no lifeline: the process still stops on signals.
        Err(_) => std::future::pending::<()>().await,
    }
}
