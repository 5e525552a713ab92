//! The request to stop `once up`: SIGTERM or SIGINT (Ctrl-C), listened to
//! from [`Shutdown::listen`] until `once up` exits.
//!
//! One listener for the whole run, not one per wait: once tokio handles a
//! signal the process no longer dies of it, and a listener only sees
//! signals that arrive after it exists. Waiting on a fresh listener each
//! time would swallow a SIGTERM that came between two waits (after the
//! start, before the final wait) and leave `once up` and its children
//! running; the one listener keeps it for the next wait.

use tokio::signal::unix::{Signal, SignalKind, signal};

#[derive(Debug)]
pub(crate) struct Shutdown {
    terminate: Signal,
    interrupt: Signal,
}

impl Shutdown {
    /// Starts listening now (needs the Tokio runtime).
    pub fn listen() -> std::io::Result<Self> {
        Ok(Self {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves once SIGTERM or SIGINT has arrived since the listener was
    /// made (or since the last time this resolved). Cancel safe: a wait
    /// given up in a `select!` loses nothing.
    pub async fn requested(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;

    use super::*;

    #[tokio::test]
    async fn a_sigterm_that_arrives_while_nobody_waits_stops_the_next_wait() {
        let mut shutdown = Shutdown::listen().unwrap();
        // A wait that ends for another reason (the start finished first).
        assert!(shutdown.requested().now_or_never().is_none());

        // Handled by the listener above, so this test process lives on.
        nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGTERM)
            .unwrap();

        tokio::time::timeout(Duration::from_secs(10), shutdown.requested())
            .await
            .expect("the SIGTERM sent between the waits is seen by the next one");
    }
}
