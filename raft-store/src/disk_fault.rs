//! A simulated full disk under the Raft log, for the storage-fault tests
//! (`failpoints` builds only; every other build has no such variable).
//!
//! `ONCE_STORE_DISK_FULL_AFTER=N`: the log's first `N` commits go to disk,
//! every later one fails with `ENOSPC` before redb writes anything — as a
//! `write` or `fsync` on a full disk returns it. The log store then does
//! what it does with any failed commit: reports the entries as not
//! persisted (openraft counts nothing from them), which stops the member's
//! Raft core; the member logs it and exits non-zero, so it never
//! acknowledges a write after a failed one
//! (`tests/api/raft_store/disk.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

/// The variable that arms the fault.
pub const DISK_FULL_AFTER: &str = "ONCE_STORE_DISK_FULL_AFTER";

/// How many more log commits the disk takes; `None`: not armed.
#[derive(Debug, Default)]
pub struct DiskFault {
    room: Option<AtomicU64>,
}

impl DiskFault {
    /// Armed from [`DISK_FULL_AFTER`] in a `failpoints` build.
    pub fn from_env() -> Self {
        #[cfg(feature = "failpoints")]
        if let Some(n) = std::env::var(DISK_FULL_AFTER)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            tracing::warn!(
                commits = n,
                "simulated disk fault armed: the log fills after {n} commits"
            );
            return Self {
                room: Some(AtomicU64::new(n)),
            };
        }
        Self::default()
    }

    /// Before a commit: `Err(ENOSPC)` once the simulated disk is full.
    pub fn before_commit(&self) -> std::io::Result<()> {
        let Some(room) = &self.room else {
            return Ok(());
        };
        let took = room.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        match took {
            Ok(_) => Ok(()),
            // ENOSPC: what `write(2)` and `fsync(2)` return on a full disk.
            Err(_) => Err(std::io::Error::from_raw_os_error(28)),
        }
    }
}
