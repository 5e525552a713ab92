//! openraft's storage conformance suite against the redb log store and
//! state machine: every case runs on a fresh directory on disk.

use once_raft_store::log_store::LogStore;
use once_raft_store::state_machine::StateMachine;
use once_raft_store::types::{StorageError, StorageIOError, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};

struct OnDisk;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for OnDisk {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(&e))?;
        let log = LogStore::open(&dir.path().join("log.redb"))
            .map_err(|e| StorageIOError::write_logs(&e))?;
        let sm = StateMachine::open(&dir.path().join("sm.redb"))
            .map_err(|e| StorageIOError::write_state_machine(&e))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn the_redb_store_passes_openraft_conformance_suite() {
    if let Err(e) = Suite::test_all(OnDisk) {
        panic!("conformance: {e}");
    }
}
