//! A server run in the test's own runtime (an application's
//! `run_until(shutdown)`) until the test stops it, and shown to stop
//! cleanly. Dropped without [`Stoppable::stop`], it is told to stop too.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[derive(Debug)]
pub struct Stoppable<E> {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), E>>,
}

impl<E: Debug + Send + 'static> Stoppable<E> {
    /// Spawns `run(signal)`; `signal` completes when the test stops it.
    pub fn spawn<F>(run: impl FnOnce(StopSignal) -> F) -> Self
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(run(StopSignal(stopped)));
        Self { stop, task }
    }

    /// Signals the stop and waits for the run to end, which must be `Ok`.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task
            .await
            .expect("the task ends")
            .expect("it stops cleanly");
    }
}

/// Completes when the test stops the run (or drops its [`Stoppable`]).
#[derive(Debug)]
pub struct StopSignal(oneshot::Receiver<()>);

impl Future for StopSignal {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx).map(|_| ())
    }
}
