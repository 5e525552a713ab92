//! The state machine on disk, in redb: records, business-key reservations,
//! placements, region status and the dedup table, plus the last applied log
//! id, the last membership and the current snapshot.
//!
//! Each `apply` call commits all of its entries, their effects and the new
//! `last_applied` in one redb transaction, so the tables never disagree with
//! `last_applied`, after a crash included. A snapshot is every data table's
//! rows written to a file from one read transaction (a consistent view while
//! apply goes on); installing one replaces the tables in one transaction.
//! Both stream row by row ([`crate::snapshot_file`] owns the format and the
//! files), so memory stays flat however many records the state holds.
//!
//! # Why apply does not fsync
//!
//! The log is the durable copy of every committed entry (its appends
//! fsync); the state machine is a function of it. So `apply` commits with
//! redb's `Durability::None` — visible at once to every reader in this
//! process, on disk with the next durable commit — and makes a durable
//! commit at least every [`DURABLE_EVERY`] or [`DURABLE_EVERY_APPLIES`]
//! applies (redb reuses freed pages only after one), and whenever a
//! snapshot is built or installed. After a crash the state machine is back
//! at its last durable `last_applied`, consistent with its tables, and
//! openraft applies the rest again from the log; apply is deterministic and
//! deduplicates by `(client id, seq)`, so the replies and state come out
//! the same. This needs the log to still hold every entry after the durable
//! point: openraft purges only up to a snapshot (minus
//! `keep_logs_after_snapshot`), and building that snapshot commits durably
//! first. It saves one fsync per member per write; a client is answered
//! only after a quorum's logs hold the entry, so nothing acknowledged
//! depends on the state machine's own fsync.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
};
use serde::{Deserialize, Serialize};

use crate::apply::{
    CLUSTER, DATA_TABLES, DUE, FLOORS, HOMES, PAYMENT_IDS, PLACEMENTS, RECORDS, REGIONS,
    TABLES_BEFORE_CLUSTER, TENANT_PAYMENTS, Tables, UNFINISHED, decode, encode,
    rebuild_derived_indexes, rebuild_home_index, tenant_payment_key, tenant_payments_prefix,
    tenants_homed_in, wire_version_in,
};
use crate::command::{BatchReply, Placement, Record, RegionStatus, Scope};
use crate::evacuation::Evacuations;
use crate::protocol::{PaymentListQuery, RecordQuery};
use crate::snapshot_file::{SnapshotContent, SnapshotDir};
use crate::types::{
    Entry, LogId, Snapshot, SnapshotData, SnapshotMeta, StorageError, StorageIOError,
    StoredMembership, TypeConfig,
};

const SM_META: TableDefinition<&str, &[u8]> = TableDefinition::new("sm_meta");
const LAST_APPLIED: &str = "last_applied";
const MEMBERSHIP: &str = "membership";
const SNAPSHOT_META: &str = "snapshot_meta";
/// Where builds before snapshot files kept the current snapshot's bytes;
/// moved to a file when such a state machine is opened.
const LEGACY_SNAPSHOT_DATA: &str = "snapshot_data";

/// An apply that takes this long is logged (how many entries, the apply
/// and its commit apart): a bulk placement move of a large region, say.
const SLOW_APPLY: Duration = Duration::from_millis(50);

/// Longest time applied state stays only in memory (module docs).
pub const DURABLE_EVERY: Duration = Duration::from_secs(1);
/// Most applies between two durable commits.
pub const DURABLE_EVERY_APPLIES: u32 = 1_000;
/// redb's page cache for the state machine, by default: what bounds the
/// member's memory for its state, however many records it holds (redb's
/// own default is 1 GiB). Reads beyond it come from the OS page cache.
pub const DEFAULT_STATE_CACHE: usize = 256 << 20;

/// When apply last committed durably.
#[derive(Debug)]
struct DurableMark {
    at: Instant,
    applies_since: u32,
}

impl DurableMark {
    fn now() -> Self {
        Self {
            at: Instant::now(),
            applies_since: 0,
        }
    }

    /// The durability of the next apply commit, counting it.
    fn next(&mut self) -> Durability {
        self.applies_since += 1;
        if self.applies_since >= DURABLE_EVERY_APPLIES || self.at.elapsed() >= DURABLE_EVERY {
            *self = Self::now();
            Durability::Immediate
        } else {
            Durability::None
        }
    }
}

/// A snapshot from a build before snapshot files: every data table as raw
/// key/value pairs, one postcard value.
#[derive(Debug, Default, Serialize, Deserialize)]
struct LegacySnapshot {
    tables: Vec<Vec<(Vec<u8>, Vec<u8>)>>,
}

/// The state machine; cheap to clone. Clones share the database: the
/// snapshot builder and the read path are clones.
#[derive(Debug, Clone)]
pub struct StateMachine {
    db: Arc<Database>,
    /// A std mutex: taken for a counter update on the blocking pool, never
    /// across an await.
    durable: Arc<Mutex<DurableMark>>,
    snapshots: Arc<SnapshotDir>,
}

fn io<E: std::error::Error + 'static>(e: E) -> StorageError {
    StorageIOError::read_state_machine(&e).into()
}

fn wio<E: std::error::Error + 'static>(e: E) -> StorageError {
    StorageIOError::write_state_machine(&e).into()
}

/// The evacuations a read transaction sees placements through.
/// (None where the `cluster` table is not there: a state installed from
/// the snapshot of a build before it.)
fn evacuations_in(txn: &redb::ReadTransaction) -> Result<Evacuations, StorageError> {
    match txn.open_table(CLUSTER) {
        Ok(cluster) => Evacuations::load::<crate::apply::ApplyError>(&cluster).map_err(io),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(Evacuations::default()),
        Err(e) => Err(io(e)),
    }
}

impl StateMachine {
    /// Opens (or creates) the state machine at `path` with the default
    /// cache ([`DEFAULT_STATE_CACHE`]).
    pub fn open(path: &Path) -> Result<Self, redb::Error> {
        Self::open_with_cache(path, DEFAULT_STATE_CACHE)
    }

    /// Opens (or creates) the state machine at `path`, with a redb page
    /// cache of `cache_bytes`.
    pub fn open_with_cache(path: &Path, cache_bytes: usize) -> Result<Self, redb::Error> {
        let db = redb::Builder::new()
            .set_cache_size(cache_bytes)
            .create(path)?;
        // Create every table up front so readers never meet a missing one.
        let txn = db.begin_write()?;
        for table in DATA_TABLES {
            txn.open_table(table)?;
        }
        txn.open_table(SM_META)?;
        // State written by a build without the derived indexes (payments,
        // listing, due): derive them once. An empty due table with records
        // may be legitimate (all in progress); deriving it again is a scan.
        let unindexed = !txn.open_table(RECORDS)?.is_empty()?
            && (txn.open_table(PAYMENT_IDS)?.is_empty()?
                || txn.open_table(TENANT_PAYMENTS)?.is_empty()?
                || txn.open_table(DUE)?.is_empty()?);
        if unindexed {
            rebuild_derived_indexes(&txn).map_err(|e| redb::Error::Io(std::io::Error::other(e)))?;
        }
        // Placements written by a build without the home index.
        if !txn.open_table(PLACEMENTS)?.is_empty()? && txn.open_table(HOMES)?.is_empty()? {
            rebuild_home_index(&txn).map_err(|e| redb::Error::Io(std::io::Error::other(e)))?;
        }
        let snapshots = SnapshotDir::beside(path)?;
        let current = {
            let mut meta = txn.open_table(SM_META)?;
            let current: Option<SnapshotMeta> = meta
                .get(SNAPSHOT_META)?
                .map(|v| decode(v.value()))
                .transpose()
                .map_err(|e| redb::Error::Io(std::io::Error::other(e)))?;
            // A snapshot a build before snapshot files kept in this table:
            // written out as its file (the reader knows that format).
            if let Some(legacy) = meta.remove(LEGACY_SNAPSHOT_DATA)? {
                if let Some(current) = &current {
                    let path = snapshots.path_of(&current.snapshot_id);
                    std::fs::write(&path, legacy.value())?;
                    std::fs::File::open(&path)?.sync_all()?;
                }
            }
            current.map(|m| m.snapshot_id)
        };
        txn.commit()?;
        if let Some(current) = current {
            snapshots.remove_all_but(&current)?;
        }
        Ok(Self {
            db: Arc::new(db),
            durable: Arc::new(Mutex::new(DurableMark::now())),
            snapshots: Arc::new(snapshots),
        })
    }

    /// The record of `scope` as this member has applied it (not
    /// linearizable by itself: callers decide when local state is enough).
    pub fn record(&self, scope: &Scope) -> Result<Option<Record>, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let table = txn.open_table(RECORDS).map_err(io)?;
        let key = encode(scope).map_err(io)?;
        let value = table.get(key.as_slice()).map_err(io)?;
        value.map(|v| decode(v.value()).map_err(io)).transpose()
    }

    /// The record that created payment `id`, as this member has applied it.
    pub fn record_of_payment(&self, id: &str) -> Result<Option<Record>, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let index = txn.open_table(PAYMENT_IDS).map_err(io)?;
        let Some(scope) = index.get(id.as_bytes()).map_err(io)? else {
            return Ok(None);
        };
        let records = txn.open_table(RECORDS).map_err(io)?;
        let value = records.get(scope.value()).map_err(io)?;
        let record: Option<Record> = value.map(|v| decode(v.value()).map_err(io)).transpose()?;
        // A key renewed past its window names a newer payment now; the old
        // payment's entry points at a record that is no longer its own.
        Ok(record.filter(|r| r.payment_id.as_deref() == Some(id)))
    }

    /// A page of `query.tenant`'s payments as the records that created
    /// them, in `(created_at, payment id)` order after `query.after`, from
    /// one read transaction. A range scan of the tenant's entries in the
    /// payment index: without filters it reads `limit` entries; with them
    /// it reads on until `limit` match or the tenant's entries end.
    pub fn tenant_payments(&self, query: &PaymentListQuery) -> Result<Vec<Record>, StorageError> {
        use std::ops::Bound;
        let txn = self.db.begin_read().map_err(io)?;
        let index = txn.open_table(TENANT_PAYMENTS).map_err(io)?;
        let records = txn.open_table(RECORDS).map_err(io)?;
        let prefix = tenant_payments_prefix(&query.tenant).map_err(io)?;
        let from = match &query.after {
            Some((at, id)) => tenant_payment_key(&query.tenant, *at, id).map_err(io)?,
            None => prefix.clone(),
        };
        let from = match query.after {
            Some(_) => Bound::Excluded(from.as_slice()),
            None => Bound::Included(from.as_slice()),
        };
        let range = index.range::<&[u8]>((from, Bound::Unbounded)).map_err(io)?;
        let mut out = Vec::new();
        for item in range {
            if out.len() >= query.limit as usize {
                break;
            }
            let (k, scope) = item.map_err(io)?;
            let Some(payment_id) = k.value().strip_prefix(prefix.as_slice()) else {
                break;
            };
            let payment_id = &payment_id[8.min(payment_id.len())..];
            let Some(value) = records.get(scope.value()).map_err(io)? else {
                continue;
            };
            let record: Record = decode(value.value()).map_err(io)?;
            // The entry is kept in step with the record; checked anyway, as
            // `record_of_payment` does, so a listing never shows a record
            // under a payment it no longer names.
            if record.payment_id.as_deref().map(str::as_bytes) == Some(payment_id)
                && query.matches(&record)
            {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// `tenant`'s placement as it is now (stored, then every evacuation
    /// after its mark: `crate::evacuation`).
    pub fn placement(&self, tenant: &str) -> Result<Option<Placement>, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let evacuations = evacuations_in(&txn)?;
        let table = txn.open_table(PLACEMENTS).map_err(io)?;
        let value = table.get(tenant.as_bytes()).map_err(io)?;
        value
            .map(|v| evacuations.read(v.value()).map_err(io))
            .transpose()
    }

    /// The group the directory assigned `tenant` to, if this group's copy
    /// says so (crate::directory).
    pub fn assignment(&self, tenant: &str) -> Result<Option<String>, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let table = txn.open_table(CLUSTER).map_err(io)?;
        crate::directory::assignment_in(&table, tenant).map_err(io)
    }

    /// The first `sample` placements, as they read now (through the
    /// evacuations): what [`crate::leadership::succession::Residence`] judges where a
    /// home region's group wants its lead by.
    pub fn sampled_placements(&self, sample: usize) -> Result<Vec<Placement>, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let evacuations = evacuations_in(&txn)?;
        let table = txn.open_table(PLACEMENTS).map_err(io)?;
        let mut placements = Vec::new();
        for item in table.iter().map_err(io)?.take(sample) {
            let (_, v) = item.map_err(io)?;
            placements.push(evacuations.read(v.value()).map_err(io)?);
        }
        Ok(placements)
    }

    /// Every region's status as last set, by region name.
    pub fn regions(&self) -> Result<Vec<(String, RegionStatus)>, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let table = txn.open_table(REGIONS).map_err(io)?;
        let mut out = Vec::new();
        for item in table.iter().map_err(io)? {
            let (k, v) = item.map_err(io)?;
            let name = String::from_utf8_lossy(k.value()).into_owned();
            out.push((name, decode(v.value()).map_err(io)?));
        }
        Ok(out)
    }

    /// The size in bytes of the current snapshot's file (`None`: no
    /// snapshot yet, or its file is gone).
    pub fn current_snapshot_bytes(&self) -> Result<Option<u64>, StorageError> {
        let Some(meta) = self.meta::<SnapshotMeta>(SNAPSHOT_META)? else {
            return Ok(None);
        };
        match std::fs::metadata(self.snapshots.path_of(&meta.snapshot_id)) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(e)),
        }
    }

    /// The wire version the cluster has moved to, as applied here.
    pub fn wire_version(&self) -> Result<u16, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let table = txn.open_table(CLUSTER).map_err(io)?;
        wire_version_in(&table).map_err(io)
    }

    /// The regions the cluster declared, as applied here
    /// ([`crate::known_regions`]).
    pub fn known_regions(&self) -> Result<std::collections::BTreeSet<String>, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let table = txn.open_table(CLUSTER).map_err(io)?;
        crate::known_regions::known_in(&table).map_err(io)
    }

    /// How many clients the dedup table remembers.
    pub fn remembered_clients(&self) -> Result<u64, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let table = txn.open_table(FLOORS).map_err(io)?;
        table.len().map_err(io)
    }

    /// The clients (at most `limit`) not seen for `idle_ms` before `now`:
    /// what [`Op::ForgetIdleClients`](crate::command::Op::ForgetIdleClients)
    /// would forget at `now`.
    pub fn idle_clients(
        &self,
        now: i64,
        idle_ms: i64,
        limit: usize,
    ) -> Result<Vec<u64>, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let table = txn.open_table(FLOORS).map_err(io)?;
        crate::sessions::idle_clients(&table, now, idle_ms, limit).map_err(io)
    }

    /// The tenants homed in `region`, by tenant, as the home index lists
    /// them (what a bulk failover reads).
    pub fn homed_in(&self, region: &str) -> Result<Vec<String>, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let table = txn.open_table(HOMES).map_err(io)?;
        tenants_homed_in(&table, region).map_err(io)
    }

    /// Every tenant's placement as it is now, by tenant.
    pub fn placements(&self) -> Result<Vec<(String, Placement)>, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let evacuations = evacuations_in(&txn)?;
        let table = txn.open_table(PLACEMENTS).map_err(io)?;
        let mut out = Vec::new();
        for item in table.iter().map_err(io)? {
            let (k, v) = item.map_err(io)?;
            let tenant = String::from_utf8_lossy(k.value()).into_owned();
            out.push((tenant, evacuations.read(v.value()).map_err(io)?));
        }
        Ok(out)
    }

    /// Records matching `query`, oldest first, at most `query.limit`.
    pub fn query(&self, query: &RecordQuery) -> Result<Vec<Record>, StorageError> {
        let mut out: Vec<Record> = Vec::new();
        self.for_each_match(query, |record| out.push(record))?;
        out.sort_by_key(|r| r.created_at);
        out.truncate(query.limit as usize);
        Ok(out)
    }

    /// How many records match `query` (its limit aside): what a gauge needs,
    /// without shipping the records.
    pub fn count(&self, query: &RecordQuery) -> Result<u64, StorageError> {
        let mut n = 0;
        self.for_each_match(query, |_| n += 1)?;
        Ok(n)
    }

    /// Calls `visit` with every record matching `query`, from one read
    /// transaction. Unfinished-only queries walk the unfinished index;
    /// others walk every record (operators' lookups).
    fn for_each_match(
        &self,
        query: &RecordQuery,
        mut visit: impl FnMut(Record),
    ) -> Result<(), StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let records = txn.open_table(RECORDS).map_err(io)?;
        let evacuations = evacuations_in(&txn)?;
        let placements = txn.open_table(PLACEMENTS).map_err(io)?;
        // Each tenant's placement read once per query, from the same read
        // transaction as the records.
        let mut homes: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
        let mut consider = |bytes: &[u8]| -> Result<(), StorageError> {
            let record: Record = decode(bytes).map_err(io)?;
            if !query.matches(&record) {
                return Ok(());
            }
            if query.homed_in.is_some() {
                let tenant = record.scope.tenant.clone();
                let homed = match homes.get(&tenant) {
                    Some(homed) => *homed,
                    None => {
                        let placement: Option<Placement> = placements
                            .get(tenant.as_bytes())
                            .map_err(io)?
                            .map(|v| evacuations.read(v.value()).map_err(io))
                            .transpose()?;
                        let homed = query.homed_in_matches(placement.as_ref());
                        homes.insert(tenant, homed);
                        homed
                    }
                };
                if !homed {
                    return Ok(());
                }
            }
            visit(record);
            Ok(())
        };
        if query.within_unfinished() {
            let index = txn.open_table(UNFINISHED).map_err(io)?;
            for item in index.iter().map_err(io)? {
                let (k, _) = item.map_err(io)?;
                if let Some(v) = records.get(k.value()).map_err(io)? {
                    consider(v.value())?;
                }
            }
        } else {
            for item in records.iter().map_err(io)? {
                let (_, v) = item.map_err(io)?;
                consider(v.value())?;
            }
        }
        Ok(())
    }

    /// Every record, for invariant checks in tests and `once store` admin.
    pub fn all_records(&self) -> Result<Vec<Record>, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let table = txn.open_table(RECORDS).map_err(io)?;
        let mut out = Vec::new();
        for item in table.iter().map_err(io)? {
            let (_, v) = item.map_err(io)?;
            out.push(decode(v.value()).map_err(io)?);
        }
        Ok(out)
    }

    fn meta<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>, StorageError> {
        let txn = self.db.begin_read().map_err(io)?;
        let table = txn.open_table(SM_META).map_err(io)?;
        let value = table.get(name).map_err(io)?;
        value.map(|v| decode(v.value()).map_err(io)).transpose()
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&Database) -> Result<T, StorageError> + Send + 'static,
    {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(wio)?
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let snapshots = self.snapshots.clone();
        let (meta, file) = self
            .blocking(move |db| {
                let txn = db.begin_read().map_err(io)?;
                // The cluster table only once it holds something: until
                // then a member of the build before can install this.
                let carried = if txn
                    .open_table(CLUSTER)
                    .map_err(io)?
                    .is_empty()
                    .map_err(io)?
                {
                    TABLES_BEFORE_CLUSTER
                } else {
                    DATA_TABLES.len()
                };
                let mut writer = snapshots.writer(carried as u16).map_err(wio)?;
                for (index, def) in DATA_TABLES.iter().take(carried).enumerate() {
                    let table = txn.open_table(*def).map_err(io)?;
                    for item in table.iter().map_err(io)? {
                        let (k, v) = item.map_err(io)?;
                        writer.row(index as u8, k.value(), v.value()).map_err(wio)?;
                    }
                }
                let meta_table = txn.open_table(SM_META).map_err(io)?;
                let read = |name: &str| -> Result<Option<Vec<u8>>, StorageError> {
                    Ok(meta_table
                        .get(name)
                        .map_err(io)?
                        .map(|v| v.value().to_vec()))
                };
                let last_applied: Option<LogId> = read(LAST_APPLIED)?
                    .map(|b| decode(&b))
                    .transpose()
                    .map_err(io)?;
                let membership: StoredMembership = read(MEMBERSHIP)?
                    .map(|b| decode(&b))
                    .transpose()
                    .map_err(io)?
                    .unwrap_or_default();
                let snapshot_id = match last_applied {
                    Some(id) => format!("{}-{}-{}", id.leader_id, id.index, rand::random::<u32>()),
                    None => format!("empty-{}", rand::random::<u32>()),
                };
                let meta = SnapshotMeta {
                    last_log_id: last_applied,
                    last_membership: membership,
                    snapshot_id,
                };
                drop(meta_table);
                drop(txn);
                let path = writer.finish(&snapshots, &meta.snapshot_id).map_err(wio)?;
                let file = std::fs::File::open(&path).map_err(io)?;
                // Keep it as the current snapshot, so a restarted member can
                // still send it to a lagging follower — unless one installed
                // meanwhile is newer. This commit is durable (the default),
                // and with it every apply before it: openraft purges the log
                // up to this snapshot next.
                let w = db.begin_write().map_err(wio)?;
                let current = {
                    let mut t = w.open_table(SM_META).map_err(wio)?;
                    let installed: Option<SnapshotMeta> = t
                        .get(SNAPSHOT_META)
                        .map_err(wio)?
                        .map(|v| decode(v.value()))
                        .transpose()
                        .map_err(wio)?;
                    match installed {
                        Some(newer) if newer.last_log_id > meta.last_log_id => newer.snapshot_id,
                        _ => {
                            t.insert(SNAPSHOT_META, encode(&meta).map_err(wio)?.as_slice())
                                .map_err(wio)?;
                            meta.snapshot_id.clone()
                        }
                    }
                };
                w.commit().map_err(wio)?;
                snapshots.remove_all_but(&current).map_err(wio)?;
                Ok((meta, file))
            })
            .await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(tokio::fs::File::from_std(file)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let last_applied = self.meta::<LogId>(LAST_APPLIED)?;
        let membership = self
            .meta::<StoredMembership>(MEMBERSHIP)?
            .unwrap_or_default();
        Ok((last_applied, membership))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<BatchReply>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let durable = self.durable.clone();
        self.blocking(move |db| {
            let started = Instant::now();
            let mut txn = db.begin_write().map_err(wio)?;
            let durability = durable.lock().unwrap_or_else(|p| p.into_inner()).next();
            txn.set_durability(durability).map_err(wio)?;
            let mut replies = Vec::with_capacity(entries.len());
            {
                let mut tables = Tables::open(&txn).map_err(wio)?;
                let mut meta = txn.open_table(SM_META).map_err(wio)?;
                for entry in &entries {
                    let reply = match &entry.payload {
                        EntryPayload::Blank => BatchReply::default(),
                        EntryPayload::Normal(batch) => {
                            let mut reply = BatchReply::default();
                            for request in &batch.requests {
                                reply.replies.push(tables.apply(request).map_err(wio)?);
                            }
                            reply
                        }
                        EntryPayload::Membership(m) => {
                            let stored = StoredMembership::new(Some(entry.log_id), m.clone());
                            meta.insert(MEMBERSHIP, encode(&stored).map_err(wio)?.as_slice())
                                .map_err(wio)?;
                            BatchReply::default()
                        }
                    };
                    replies.push(reply);
                }
                let last = entries.last().map(|e| e.log_id);
                meta.insert(
                    LAST_APPLIED,
                    encode(&last.expect("non-empty")).map_err(wio)?.as_slice(),
                )
                .map_err(wio)?;
            }
            let applied = started.elapsed();
            txn.commit().map_err(wio)?;
            let took = started.elapsed();
            if took >= SLOW_APPLY {
                tracing::info!(
                    entries = entries.len(),
                    first = entries[0].log_id.index,
                    apply_ms = applied.as_millis() as u64,
                    commit_ms = (took - applied).as_millis() as u64,
                    "slow apply"
                );
            }
            Ok(replies)
        })
        .await
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageError> {
        let snapshots = self.snapshots.clone();
        let file = tokio::task::spawn_blocking(move || snapshots.receiving())
            .await
            .map_err(wio)?
            .map_err(wio)?;
        Ok(Box::new(tokio::fs::File::from_std(file)))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError> {
        let meta = meta.clone();
        let file = snapshot.into_std().await;
        let snapshots = self.snapshots.clone();
        self.blocking(move |db| {
            let signature = Some(meta.signature());
            let err = |e: &dyn std::fmt::Display| -> StorageError {
                StorageIOError::write_snapshot(signature.clone(), openraft::AnyError::error(e))
                    .into()
            };
            let content = SnapshotContent::open(file.try_clone().map_err(|e| err(&e))?)
                .map_err(|e| err(&e))?;
            let txn = db.begin_write().map_err(|e| err(&e))?;
            // Every data table starts empty: tables an older build's
            // snapshot does not carry are derived from the records after.
            for def in DATA_TABLES {
                txn.delete_table(def).map_err(|e| err(&e))?;
            }
            let carried = match content {
                SnapshotContent::Rows(mut rows) => {
                    let carried = usize::from(rows.tables());
                    if carried > DATA_TABLES.len() {
                        return Err(err(&format!(
                            "snapshot from a newer build: {carried} tables, this build knows {}",
                            DATA_TABLES.len()
                        )));
                    }
                    let mut tables = DATA_TABLES
                        .iter()
                        .map(|def| txn.open_table(*def))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| err(&e))?;
                    while let Some(row) = rows.next_row().map_err(|e| err(&e))? {
                        tables[usize::from(row.table)]
                            .insert(row.key.as_slice(), row.value.as_slice())
                            .map_err(|e| err(&e))?;
                    }
                    carried
                }
                SnapshotContent::Legacy(bytes) => {
                    let body: LegacySnapshot = decode(&bytes).map_err(|e| err(&e))?;
                    let carried = body.tables.len().min(DATA_TABLES.len());
                    for (def, rows) in DATA_TABLES.iter().zip(body.tables) {
                        let mut table = txn.open_table(*def).map_err(|e| err(&e))?;
                        for (k, v) in rows {
                            table
                                .insert(k.as_slice(), v.as_slice())
                                .map_err(|e| err(&e))?;
                        }
                    }
                    carried
                }
            };
            if carried < TABLES_BEFORE_CLUSTER {
                rebuild_derived_indexes(&txn).map_err(|e| err(&e))?;
                rebuild_home_index(&txn).map_err(|e| err(&e))?;
            }
            // Named as the current snapshot before the commit that says so.
            snapshots
                .keep_received(&file, &meta.snapshot_id)
                .map_err(|e| err(&e))?;
            {
                let mut t = txn.open_table(SM_META).map_err(|e| err(&e))?;
                if let Some(last) = meta.last_log_id {
                    t.insert(LAST_APPLIED, encode(&last).map_err(|e| err(&e))?.as_slice())
                        .map_err(|e| err(&e))?;
                }
                t.insert(
                    MEMBERSHIP,
                    encode(&meta.last_membership)
                        .map_err(|e| err(&e))?
                        .as_slice(),
                )
                .map_err(|e| err(&e))?;
                t.insert(
                    SNAPSHOT_META,
                    encode(&meta).map_err(|e| err(&e))?.as_slice(),
                )
                .map_err(|e| err(&e))?;
            }
            txn.commit().map_err(|e| err(&e))?;
            snapshots
                .remove_all_but(&meta.snapshot_id)
                .map_err(|e| err(&e))?;
            Ok(())
        })
        .await
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        let Some(meta) = self.meta::<SnapshotMeta>(SNAPSHOT_META)? else {
            return Ok(None);
        };
        match tokio::fs::File::open(self.snapshots.path_of(&meta.snapshot_id)).await {
            Ok(file) => Ok(Some(Snapshot {
                meta,
                snapshot: Box::new(file),
            })),
            // Recorded but gone (removed by hand): openraft builds another
            // when a follower needs one.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!(snapshot = %meta.snapshot_id, "the current snapshot's file is missing");
                Ok(None)
            }
            Err(e) => Err(io(e)),
        }
    }
}
