//! The Raft log on disk, in redb: entries, the vote, the committed id and
//! the last purged id.
//!
//! Durability contract (what openraft relies on for safety):
//! - `append` calls its `LogFlushed` callback only after the redb commit
//!   that holds the entries returned; a redb commit with the default
//!   `Durability::Immediate` fsyncs before it returns.
//! - `save_vote` returns only after its commit: a member never forgets a
//!   vote it granted, so it cannot vote twice in one term.
//! - `truncate(id)` removes `id` itself and everything after it.
//! - `purge(id)` writes `last_purged = id` in the same transaction that
//!   deletes the entries, so the record of the purge is never later than
//!   the deletion.
//! - `save_committed` is the one write that does not fsync (see there).
//!
//! Writes run on the blocking pool: a commit waits for an fsync and must
//! not stall a runtime worker.
//!
//! Every batch `append` is given is also offered, before its fsync, to
//! whoever listens ([`LogStore::appends`]): the leader's pipelined
//! replication ([`crate::pipeline`]) sends it to the followers while the
//! leader's own fsync runs.
//!
//! `append` returns only after its fsync, although openraft's contract
//! allows returning first and calling the callback later. Nothing would
//! gain: openraft 0.9's core awaits the callback inside its own
//! `append_to_log` before its next step (replication included), so the
//! leader's fsync cannot overlap the followers' (tried on 2026-12-03; see
//! `BENCHMARKS.md`, raft-store vs etcd). openraft 0.10's non-blocking log
//! IO would change that.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::broadcast;

use crate::disk_fault::DiskFault;
use crate::types::{Entry, LogId, LogState, StorageError, StorageIOError, TypeConfig, Vote};

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("log_meta");

const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const LAST_PURGED: &str = "last_purged";

/// The log store; cheap to clone (one shared redb database).
#[derive(Debug, Clone)]
pub struct LogStore {
    db: Arc<Database>,
    appended: Arc<Appended>,
    appends: broadcast::Sender<AppendedBatch>,
    /// The simulated full disk of the storage-fault tests (unarmed outside
    /// them).
    disk: Arc<DiskFault>,
}

/// One batch of entries as `append` was given it.
pub type AppendedBatch = Arc<[Entry]>;

/// How many batches a slow listener may fall behind before it misses some.
const APPENDS_BUFFER: usize = 1024;

/// What was appended since this process opened the log.
#[derive(Debug, Default)]
struct Appended {
    bytes: AtomicU64,
    entries: AtomicU64,
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_allocvec(v)
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, postcard::Error> {
    postcard::from_bytes(bytes)
}

/// redb's page cache for the log (redb's own default is 1 GiB). The log
/// holds up to `snapshot_every` + `keep_logs_after_snapshot` entries of up
/// to 512 requests each, gigabytes under load; replication reads what was
/// just appended, so a small cache serves it and memory stays bounded.
pub const LOG_CACHE: usize = 128 << 20;

impl LogStore {
    /// Opens (or creates) the log at `path`.
    pub fn open(path: &Path) -> Result<Self, redb::DatabaseError> {
        let db = redb::Builder::new()
            .set_cache_size(LOG_CACHE)
            .create(path)?;
        Ok(Self {
            db: Arc::new(db),
            appended: Arc::default(),
            appends: broadcast::channel(APPENDS_BUFFER).0,
            disk: Arc::new(DiskFault::from_env()),
        })
    }

    /// Every batch appended from now on, offered when its append starts
    /// (before the fsync). A listener that falls more than
    /// `APPENDS_BUFFER` batches behind misses some and is told so.
    pub fn appends(&self) -> broadcast::Sender<AppendedBatch> {
        self.appends.clone()
    }

    /// The mean size in bytes of the entries appended since this process
    /// opened the log (`None`: none yet): what the snapshot policy weighs
    /// the log by ([`crate::snapshot_policy`]).
    pub fn mean_entry_bytes(&self) -> Option<u64> {
        let entries = self.appended.entries.load(Ordering::Relaxed);
        (entries > 0).then(|| self.appended.bytes.load(Ordering::Relaxed) / entries)
    }

    fn read_meta<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, StorageIOError> {
        let txn = self.db.begin_read().map_err(|e| StorageIOError::read(&e))?;
        let table = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(StorageIOError::read(&e)),
        };
        let value = table.get(name).map_err(|e| StorageIOError::read(&e))?;
        value
            .map(|v| decode(v.value()).map_err(|e| StorageIOError::read(&e)))
            .transpose()
    }

    /// Runs `write` in one write transaction and commits it (fsync), on the
    /// blocking pool.
    async fn commit<F>(&self, write: F) -> Result<(), redb::Error>
    where
        F: FnOnce(&redb::WriteTransaction) -> Result<(), redb::Error> + Send + 'static,
    {
        let (db, disk) = (self.db.clone(), self.disk.clone());
        let result = tokio::task::spawn_blocking(move || {
            disk.before_commit()?;
            let txn = db.begin_write()?;
            write(&txn)?;
            txn.commit()?;
            Ok(())
        })
        .await
        .map_err(|e| redb::Error::Io(std::io::Error::other(e)))?;
        if let Err(e) = &result {
            // Said here, once per failed commit, because what follows is
            // openraft's: the error stops the Raft core and the member
            // exits (`StoreServer::run_until`), having acknowledged nothing
            // of this commit.
            tracing::error!(
                error = %e,
                "raft log commit failed (disk full, fsync failed or the file damaged): \
                 nothing of it is persisted or acknowledged; this member stops"
            );
        }
        result
    }

    async fn write_meta<T: Serialize>(
        &self,
        name: &'static str,
        value: &T,
    ) -> Result<(), redb::Error> {
        let bytes = encode(value).map_err(|e| redb::Error::Io(std::io::Error::other(e)))?;
        self.commit(move |txn| {
            txn.open_table(META)?.insert(name, bytes.as_slice())?;
            Ok(())
        })
        .await
    }

    fn last_entry_id(&self) -> Result<Option<LogId>, StorageIOError> {
        let txn = self
            .db
            .begin_read()
            .map_err(|e| StorageIOError::read_logs(&e))?;
        let table = match txn.open_table(LOG) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(StorageIOError::read_logs(&e)),
        };
        let last = table.last().map_err(|e| StorageIOError::read_logs(&e))?;
        last.map(|(_, v)| {
            decode::<Entry>(v.value())
                .map(|e| e.log_id)
                .map_err(|e| StorageIOError::read_logs(&e))
        })
        .transpose()
    }
}

fn range_bounds(range: &impl RangeBounds<u64>) -> (u64, Option<u64>) {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s + 1,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => Some(e.saturating_add(1)),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => None,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let (start, end) = range_bounds(&range);
        let txn = self
            .db
            .begin_read()
            .map_err(|e| StorageIOError::read_logs(&e))?;
        let table = match txn.open_table(LOG) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(StorageIOError::read_logs(&e).into()),
        };
        let iter = match end {
            Some(end) => table.range(start..end),
            None => table.range(start..),
        }
        .map_err(|e| StorageIOError::read_logs(&e))?;
        let mut entries = Vec::new();
        for item in iter {
            let (_, v) = item.map_err(|e| StorageIOError::read_logs(&e))?;
            entries.push(decode(v.value()).map_err(|e| StorageIOError::read_logs(&e))?);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState, StorageError> {
        let last_purged_log_id: Option<LogId> = self.read_meta(LAST_PURGED)?;
        let last_log_id = self.last_entry_id()?.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.write_meta(VOTE, vote)
            .await
            .map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.read_meta(VOTE).map_err(Into::into)
    }

    /// Not fsynced: the committed id is a hint that lets a restarted member
    /// apply what it knows is committed before it hears from a leader. Any
    /// value that reaches the disk was really committed; a lost one only
    /// means waiting for the leader. It reaches the disk with the next
    /// append, vote or purge, and it runs inline in openraft's core loop,
    /// where an fsync would delay every other step.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let bytes = encode(&committed).map_err(|e| StorageIOError::write(&e))?;
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || -> Result<(), redb::Error> {
            let mut txn = db.begin_write()?;
            txn.set_durability(redb::Durability::None)
                .map_err(|e| redb::Error::Io(std::io::Error::other(e)))?;
            txn.open_table(META)?.insert(COMMITTED, bytes.as_slice())?;
            txn.commit()?;
            Ok(())
        })
        .await
        .map_err(|e| StorageIOError::write(&e))?
        .map_err(|e| StorageIOError::write(&e).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.read_meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: AppendedBatch = entries.into_iter().collect();
        let mut encoded = Vec::with_capacity(entries.len());
        for entry in entries.iter() {
            let bytes = encode(entry).map_err(|e| StorageIOError::write_logs(&e))?;
            encoded.push((entry.log_id.index, bytes));
        }
        if self.appends.receiver_count() > 0 && !entries.is_empty() {
            // Fails only when every listener has just gone: nobody to tell.
            let _ = self.appends.send(entries);
        }
        let size: usize = encoded.iter().map(|(_, b)| b.len()).sum();
        self.appended
            .bytes
            .fetch_add(size as u64, Ordering::Relaxed);
        self.appended
            .entries
            .fetch_add(encoded.len() as u64, Ordering::Relaxed);
        let result = self
            .commit(move |txn| {
                let mut table = txn.open_table(LOG)?;
                for (index, bytes) in &encoded {
                    table.insert(*index, bytes.as_slice())?;
                }
                Ok(())
            })
            .await;
        // The commit above has fsynced (or failed): only now may openraft
        // count these entries as persisted.
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(StorageIOError::write_logs(&e).into())
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let from = log_id.index;
        self.commit(move |txn| {
            let mut table = txn.open_table(LOG)?;
            table.retain_in(from.., |_, _| false)?;
            Ok(())
        })
        .await
        .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let bytes = encode(&log_id).map_err(|e| StorageIOError::write_logs(&e))?;
        let upto = log_id.index;
        self.commit(move |txn| {
            // Same transaction: the purge is recorded no later than it happens.
            txn.open_table(META)?
                .insert(LAST_PURGED, bytes.as_slice())?;
            txn.open_table(LOG)?.retain_in(..=upto, |_, _| false)?;
            Ok(())
        })
        .await
        .map_err(|e| StorageIOError::write_logs(&e).into())
    }
}
