//! A runtime with a thread of its own: for the work a role must go on
//! doing while its main runtime is swamped by client requests — probes,
//! operator endpoints, control loops (RELIABILITY.md, finding 17).
//!
//! Serve a listener on it with [`crate::Server::on_runtime`]; spawn a loop
//! on it with [`OwnRuntime::handle`]. Connections its tasks open are
//! registered with its reactor and driven by its thread, so they do not
//! wait on the main runtime either — as long as a client used there is
//! used only there (a pooled connection is driven by the runtime that
//! opened it). Dropped, it shuts down in the background: safe from inside
//! another runtime, where dropping a `tokio::runtime::Runtime` panics.

use tokio::runtime::{Builder, Handle, Runtime};

#[derive(Debug)]
pub struct OwnRuntime {
    /// `Some` until dropped.
    runtime: Option<Runtime>,
}

impl OwnRuntime {
    /// One worker thread named `name` (it names the thread in a dump).
    pub fn start(name: &str) -> std::io::Result<Self> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(name)
            .enable_all()
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
        })
    }

    pub fn handle(&self) -> &Handle {
        self.runtime
            .as_ref()
            .expect("present until dropped")
            .handle()
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // Drops what its tasks left without blocking the caller,
            // which may be another runtime's thread.
            runtime.shutdown_background();
        }
    }
}
