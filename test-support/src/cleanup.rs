//! Async cleanup run from a `Drop` (a test database dropped, a stream
//! deleted), whether the test passed or panicked: a drop may run inside the
//! test's runtime or after it is gone, so the cleanup gets a thread and a
//! small runtime of its own, and the drop waits for it.

use std::future::Future;

/// Runs `cleanup` to completion before returning.
pub fn run(cleanup: impl Future<Output = ()> + Send + 'static) {
    let _ = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(cleanup);
    })
    .join();
}
