//! Deterministic apply: one client request against the state-machine tables,
//! inside the write transaction of the entries being applied.
//!
//! Nothing here reads a clock or any state outside the tables: the only
//! time is `ClientRequest::now`, stamped by the proposer. Every request is
//! first looked up in the dedup table by `(client, seq)`; a retry of a
//! command that already applied gets the stored reply and changes nothing.

use std::collections::BTreeSet;

use redb::{ReadableTable, Table, TableDefinition};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::command::{
    BusinessKey, ClientRequest, Millis, MovedPlacement, NewClaim, Op, Placement, Record, Reply,
    Scope, Status, Step, TakeOverKind,
};
use crate::directory;
use crate::evacuation::{Evacuation, Evacuations, StoredPlacement};
use crate::known_regions;
use crate::sessions::{self, session_key};

type Bytes = &'static [u8];

/// Scope (postcard) → `Record` (postcard).
pub(crate) const RECORDS: TableDefinition<Bytes, Bytes> = TableDefinition::new("records");
/// Business key (postcard) → `Reservation` (postcard).
pub(crate) const BUSINESS_KEYS: TableDefinition<Bytes, Bytes> =
    TableDefinition::new("business_keys");
/// Tenant → `Placement` and its evacuation mark ([`StoredPlacement`]; read
/// through [`Evacuations::read`], never decoded alone).
pub(crate) const PLACEMENTS: TableDefinition<Bytes, Bytes> = TableDefinition::new("placements");
/// Region → `RegionStatus`.
pub(crate) const REGIONS: TableDefinition<Bytes, Bytes> = TableDefinition::new("regions");
/// `client (8 bytes BE) ‖ seq (8 bytes BE)` → `Reply`: the dedup table.
pub(crate) const SESSIONS: TableDefinition<Bytes, Bytes> = TableDefinition::new("sessions");
/// `client (8 bytes BE)` → lowest seq still remembered (8 bytes BE).
pub(crate) const FLOORS: TableDefinition<Bytes, Bytes> = TableDefinition::new("session_floors");
/// Scope (postcard) → nothing: the unfinished records (`IN_PROGRESS`,
/// `UNKNOWN_REQUIRES_RECOVERY`), so recovery scans never walk finished ones.
/// Kept by [`Tables::put_record`], the one place records are written.
pub(crate) const UNFINISHED: TableDefinition<Bytes, Bytes> = TableDefinition::new("unfinished");

/// Payment id → scope (postcard): finds a payment's record, so a region
/// that never held the payment's row can still answer for it. Kept by
/// [`Tables::put_record`] and the purge; derived from `RECORDS` alone, so it
/// can be rebuilt ([`rebuild_derived_indexes`]).
pub(crate) const PAYMENT_IDS: TableDefinition<Bytes, Bytes> = TableDefinition::new("payment_ids");

/// `postcard(tenant) ‖ created_at ‖ payment id` → scope (postcard): each
/// tenant's payments in creation order, what `GET /payments` lists in every
/// region ([`tenant_payment_key`]). One entry per record that names a
/// payment, under the record's current payment and `created_at`: kept by
/// [`Tables::put_record`] (a key renewed past its window moves its entry
/// to the new payment) and the purge; derived from `RECORDS` alone, so it
/// can be rebuilt ([`rebuild_derived_indexes`]).
pub(crate) const TENANT_PAYMENTS: TableDefinition<Bytes, Bytes> =
    TableDefinition::new("tenant_payments");

/// `kind ‖ at (8 bytes BE) ‖ scope (postcard)` → nothing: when each record
/// is next due for the sweeper, so expiry and purge read only the records
/// that are due, oldest first, never the whole table ([`due_entry`]).
/// Kind `e`: a finished record whose replay window ends at `at`; kind `p`:
/// an expired record whose metadata may be purged at `at`. Kept by
/// [`Tables::put_record`] and the purge; derived from `RECORDS` alone, so
/// it can be rebuilt ([`rebuild_derived_indexes`]).
pub(crate) const DUE: TableDefinition<Bytes, Bytes> = TableDefinition::new("due");

/// `postcard(home) ‖ tenant` → nothing: the tenants homed in each region,
/// so a bulk failover ([`Op::MoveRegion`]) reads only the tenants it moves
/// ([`home_key`]). Kept by [`Tables::put_placement`], the one place
/// placements are written; derived from `PLACEMENTS` alone, so it can be
/// rebuilt ([`rebuild_home_index`]).
pub(crate) const HOMES: TableDefinition<Bytes, Bytes> = TableDefinition::new("homes");

/// `name` → value: what the cluster as a whole has agreed, replicated like
/// everything else: [`WIRE_VERSION_KEY`], and the evacuations still
/// applied on read (`crate::evacuation`). Last of the data
/// tables, and carried by a snapshot only once it holds anything, so a
/// cluster that has not moved past wire version 1 still sends snapshots a
/// member of the build before installs.
pub(crate) const CLUSTER: TableDefinition<Bytes, Bytes> = TableDefinition::new("cluster");
/// The wire version the cluster has moved to (u16 big-endian; absent: 1).
pub(crate) const WIRE_VERSION_KEY: &[u8] = b"wire_version";

/// The kinds of [`DUE`] entries.
const DUE_TO_EXPIRE: u8 = b'e';
const DUE_TO_PURGE: u8 = b'p';

/// Every table a snapshot carries, in a fixed order. New tables go last: a
/// snapshot from an older build carries a prefix of this list, and the
/// derived tables it lacks are rebuilt after it is installed.
pub(crate) const DATA_TABLES: [TableDefinition<Bytes, Bytes>; 12] = [
    RECORDS,
    BUSINESS_KEYS,
    PLACEMENTS,
    REGIONS,
    SESSIONS,
    FLOORS,
    UNFINISHED,
    PAYMENT_IDS,
    TENANT_PAYMENTS,
    DUE,
    HOMES,
    CLUSTER,
];

/// How many of [`DATA_TABLES`] a snapshot of a build before [`CLUSTER`]
/// carried: a snapshot with fewer lacks derived indexes, rebuilt after it
/// installs.
pub(crate) const TABLES_BEFORE_CLUSTER: usize = 11;

/// The wire version in `cluster` (1 when none was ever set).
pub(crate) fn wire_version_in(
    cluster: &impl ReadableTable<Bytes, Bytes>,
) -> Result<u16, redb::StorageError> {
    Ok(cluster
        .get(WIRE_VERSION_KEY)?
        .and_then(|v| <[u8; 2]>::try_from(v.value()).ok())
        .map_or(1, u16::from_be_bytes))
}

/// Where the tenants homed in `region` start in [`HOMES`]: the region is
/// postcard (length-prefixed, so no region's prefix starts another's).
pub(crate) fn home_prefix(region: &str) -> Result<Vec<u8>, postcard::Error> {
    encode(&region)
}

/// The key of `tenant` homed in `region` in [`HOMES`].
pub(crate) fn home_key(region: &str, tenant: &str) -> Result<Vec<u8>, postcard::Error> {
    let mut key = home_prefix(region)?;
    key.extend_from_slice(tenant.as_bytes());
    Ok(key)
}

/// The first key past every key that starts with `prefix` (`None`: no
/// such key, every key from `prefix` on starts with it).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The tenants `homes` lists under `region`, in tenant order.
pub(crate) fn tenants_homed_in(
    homes: &impl ReadableTable<Bytes, Bytes>,
    region: &str,
) -> Result<Vec<String>, ApplyError> {
    let prefix = home_prefix(region)?;
    let mut tenants = Vec::new();
    for item in homes.range(prefix.as_slice()..)? {
        let (k, _) = item?;
        let Some(tenant) = k.value().strip_prefix(prefix.as_slice()) else {
            break;
        };
        tenants.push(String::from_utf8_lossy(tenant).into_owned());
    }
    Ok(tenants)
}

/// Fills [`HOMES`] from every placement (a state machine written by a
/// build without it, or a snapshot from one). Returns how many tenants.
pub(crate) fn rebuild_home_index(txn: &redb::WriteTransaction) -> Result<u64, ApplyError> {
    let placements = txn.open_table(PLACEMENTS)?;
    let mut homes = txn.open_table(HOMES)?;
    homes.retain(|_, _| false)?;
    let mut n = 0;
    for item in placements.iter()? {
        let (k, v) = item?;
        // The index lists the home as stored (evacuations are resolved on
        // read, and written out before the index is read: `move_region`).
        let placement = StoredPlacement::decode(v.value())?.placement;
        let tenant = String::from_utf8_lossy(k.value());
        homes.insert(
            home_key(&placement.home, &tenant)?.as_slice(),
            [].as_slice(),
        )?;
        n += 1;
    }
    Ok(n)
}

/// The key of a tenant's payment in [`TENANT_PAYMENTS`]. The tenant is
/// postcard (length-prefixed, so no tenant's prefix starts another's);
/// `created_at` is 8 bytes big-endian with the sign bit flipped, so bytes
/// order as the numbers do; the payment id's bytes break ties.
pub(crate) fn tenant_payment_key(
    tenant: &str,
    created_at: Millis,
    payment_id: &str,
) -> Result<Vec<u8>, postcard::Error> {
    let mut key = tenant_payments_prefix(tenant)?;
    key.extend_from_slice(&((created_at as u64) ^ (1 << 63)).to_be_bytes());
    key.extend_from_slice(payment_id.as_bytes());
    Ok(key)
}

/// Where one tenant's entries in [`TENANT_PAYMENTS`] start.
pub(crate) fn tenant_payments_prefix(tenant: &str) -> Result<Vec<u8>, postcard::Error> {
    encode(&tenant)
}

/// The entry `record` has in [`TENANT_PAYMENTS`], if it names a payment.
fn tenant_payment_entry(record: &Record) -> Result<Option<Vec<u8>>, postcard::Error> {
    record
        .payment_id
        .as_deref()
        .map(|id| tenant_payment_key(&record.scope.tenant, record.created_at, id))
        .transpose()
}

/// The [`DUE`] entry of `record`: when the sweeper next has work on it,
/// if ever.
fn due_entry(record: &Record) -> Result<Option<Vec<u8>>, postcard::Error> {
    let due = if record.status == Status::Expired {
        record.purge_after.map(|at| (DUE_TO_PURGE, at))
    } else if record.status.can_expire() {
        record.expires_at.map(|at| (DUE_TO_EXPIRE, at))
    } else {
        None
    };
    let Some((kind, at)) = due else {
        return Ok(None);
    };
    let mut key = due_prefix(kind, at).to_vec();
    key.extend(encode(&record.scope)?);
    Ok(Some(key))
}

/// `kind ‖ at`: entries of `kind` due at `at` start here, and sort by time.
fn due_prefix(kind: u8, at: Millis) -> [u8; 9] {
    let mut prefix = [0; 9];
    prefix[0] = kind;
    prefix[1..].copy_from_slice(&(at.max(0) as u64).to_be_bytes());
    prefix
}

/// Fills the derived tables — [`PAYMENT_IDS`], [`TENANT_PAYMENTS`], [`DUE`]
/// — from every record (a state machine written by a build without them,
/// or a snapshot from one). Returns how many records name a payment.
pub(crate) fn rebuild_derived_indexes(txn: &redb::WriteTransaction) -> Result<u64, ApplyError> {
    let records = txn.open_table(RECORDS)?;
    let mut ids = txn.open_table(PAYMENT_IDS)?;
    let mut listing = txn.open_table(TENANT_PAYMENTS)?;
    let mut due = txn.open_table(DUE)?;
    ids.retain(|_, _| false)?;
    listing.retain(|_, _| false)?;
    due.retain(|_, _| false)?;
    let mut n = 0;
    for item in records.iter()? {
        let (k, v) = item?;
        let record: Record = decode(v.value())?;
        if let Some(id) = &record.payment_id {
            ids.insert(id.as_bytes(), k.value())?;
            n += 1;
        }
        if let Some(entry) = tenant_payment_entry(&record)? {
            listing.insert(entry.as_slice(), k.value())?;
        }
        if let Some(entry) = due_entry(&record)? {
            due.insert(entry.as_slice(), [].as_slice())?;
        }
    }
    Ok(n)
}

/// Who holds a business key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reservation {
    pub payment_id: Option<String>,
    pub scope: Scope,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApplyError {
    #[error(transparent)]
    Storage(#[from] redb::Error),
    #[error("encoding: {0}")]
    Codec(#[from] postcard::Error),
}

impl From<redb::StorageError> for ApplyError {
    fn from(e: redb::StorageError) -> Self {
        Self::Storage(e.into())
    }
}

impl From<redb::TableError> for ApplyError {
    fn from(e: redb::TableError) -> Self {
        Self::Storage(e.into())
    }
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_allocvec(v)
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, postcard::Error> {
    postcard::from_bytes(bytes)
}

/// The open tables of one write transaction.
pub(crate) struct Tables<'txn> {
    pub records: Table<'txn, Bytes, Bytes>,
    pub business_keys: Table<'txn, Bytes, Bytes>,
    pub placements: Table<'txn, Bytes, Bytes>,
    pub regions: Table<'txn, Bytes, Bytes>,
    pub sessions: Table<'txn, Bytes, Bytes>,
    pub floors: Table<'txn, Bytes, Bytes>,
    pub unfinished: Table<'txn, Bytes, Bytes>,
    pub payment_ids: Table<'txn, Bytes, Bytes>,
    pub tenant_payments: Table<'txn, Bytes, Bytes>,
    pub due: Table<'txn, Bytes, Bytes>,
    pub homes: Table<'txn, Bytes, Bytes>,
    pub cluster: Table<'txn, Bytes, Bytes>,
    /// The cluster's wire version, read once per transaction.
    wire_version: u16,
    /// The evacuations placements are read through, read once per
    /// transaction.
    evacuations: Evacuations,
    /// The cluster's declared regions, read once per transaction.
    known_regions: BTreeSet<String>,
}

impl<'txn> Tables<'txn> {
    pub fn open(txn: &'txn redb::WriteTransaction) -> Result<Self, redb::Error> {
        let cluster = txn.open_table(CLUSTER)?;
        Ok(Self {
            records: txn.open_table(RECORDS)?,
            business_keys: txn.open_table(BUSINESS_KEYS)?,
            placements: txn.open_table(PLACEMENTS)?,
            regions: txn.open_table(REGIONS)?,
            sessions: txn.open_table(SESSIONS)?,
            floors: txn.open_table(FLOORS)?,
            unfinished: txn.open_table(UNFINISHED)?,
            payment_ids: txn.open_table(PAYMENT_IDS)?,
            tenant_payments: txn.open_table(TENANT_PAYMENTS)?,
            due: txn.open_table(DUE)?,
            homes: txn.open_table(HOMES)?,
            wire_version: wire_version_in(&cluster)?,
            evacuations: Evacuations::load::<ApplyError>(&cluster)
                .map_err(|e| redb::Error::Io(std::io::Error::other(e)))?,
            known_regions: known_regions::known_in(&cluster)?,
            cluster,
        })
    }

    fn get<T: DeserializeOwned>(
        table: &Table<'txn, Bytes, Bytes>,
        key: &[u8],
    ) -> Result<Option<T>, ApplyError> {
        match table.get(key)? {
            Some(v) => Ok(Some(decode(v.value())?)),
            None => Ok(None),
        }
    }

    fn record(&self, scope: &Scope) -> Result<Option<Record>, ApplyError> {
        Self::get(&self.records, &encode(scope)?)
    }

    fn put_record(&mut self, record: &Record) -> Result<(), ApplyError> {
        let key = encode(&record.scope)?;
        let previous: Option<Record> = self
            .records
            .insert(key.as_slice(), encode(record)?.as_slice())?
            .map(|v| decode(v.value()))
            .transpose()?;
        // Most writes keep the record's payment and creation time: then the
        // listing entry stays as it is and no index page is touched.
        let was_listed = previous
            .as_ref()
            .map(tenant_payment_entry)
            .transpose()?
            .flatten();
        let listed = tenant_payment_entry(record)?;
        if was_listed != listed {
            if let Some(old) = was_listed {
                self.tenant_payments.remove(old.as_slice())?;
            }
            if let Some(new) = listed {
                self.tenant_payments
                    .insert(new.as_slice(), key.as_slice())?;
            }
        }
        let (was_due, due) = (
            previous.as_ref().map(due_entry).transpose()?.flatten(),
            due_entry(record)?,
        );
        if was_due != due {
            if let Some(old) = was_due {
                self.due.remove(old.as_slice())?;
            }
            if let Some(new) = due {
                self.due.insert(new.as_slice(), [].as_slice())?;
            }
        }
        if record.status.is_unfinished() {
            self.unfinished.insert(key.as_slice(), [].as_slice())?;
        } else {
            self.unfinished.remove(key.as_slice())?;
        }
        if let Some(id) = &record.payment_id {
            // Written once per payment; the many later writes of the same
            // record only read it (a read dirties no page).
            let indexed = self
                .payment_ids
                .get(id.as_bytes())?
                .is_some_and(|v| v.value() == key.as_slice());
            if !indexed {
                self.payment_ids.insert(id.as_bytes(), key.as_slice())?;
            }
        }
        Ok(())
    }

    /// `tenant`'s placement as it is now: stored, then every evacuation
    /// after its mark.
    fn placement(&self, tenant: &str) -> Result<Option<Placement>, ApplyError> {
        match self.placements.get(tenant.as_bytes())? {
            Some(v) => Ok(Some(self.evacuations.read(v.value())?)),
            None => Ok(None),
        }
    }

    /// Writes `tenant`'s placement, with the current evacuation mark, and
    /// keeps [`HOMES`] in step with the home stored before: the one place
    /// placements are written. A bulk move drops the entries under the
    /// region it empties in one pass instead (`unindex_previous` false).
    fn put_placement(
        &mut self,
        tenant: &str,
        placement: &Placement,
        unindex_previous: bool,
    ) -> Result<(), ApplyError> {
        let stored = StoredPlacement::encode(placement, self.evacuations.mark())?;
        self.evacuations.placement_written(&mut self.cluster)?;
        let stored_home = self
            .placements
            .insert(tenant.as_bytes(), stored.as_slice())?
            .map(|v| StoredPlacement::decode(v.value()).map(|s| s.placement.home))
            .transpose()?;
        if stored_home.as_deref() != Some(placement.home.as_str()) {
            if let Some(old) = stored_home.filter(|_| unindex_previous) {
                self.homes.remove(home_key(&old, tenant)?.as_slice())?;
            }
            self.homes
                .insert(home_key(&placement.home, tenant)?.as_slice(), [].as_slice())?;
        }
        Ok(())
    }

    /// Writes every placement an evacuation changed as it now reads, then
    /// forgets the evacuations: what a command that reads placements by
    /// their stored home ([`HOMES`]) or scans them all does first. Costs a
    /// scan of every placement; only failback and the older bulk move do
    /// it, and only while an evacuation is pending.
    fn write_out_evacuations(&mut self) -> Result<(), ApplyError> {
        if self.evacuations.is_empty() {
            return Ok(());
        }
        let mut changed = Vec::new();
        for item in self.placements.iter()? {
            let (k, v) = item?;
            let stored = StoredPlacement::decode(v.value())?;
            let now = self.evacuations.resolve(stored.clone());
            if now != stored.placement {
                changed.push((String::from_utf8_lossy(k.value()).into_owned(), now));
            }
        }
        for (tenant, placement) in changed {
            self.put_placement(&tenant, &placement, true)?;
        }
        self.evacuations.forget(&mut self.cluster)?;
        Ok(())
    }

    /// [`Op::EvacuateRegion`]: one row, whatever the number of tenants.
    fn evacuate_region(&mut self, from: &str, eligible: &[String]) -> Result<Reply, ApplyError> {
        let evacuation = Evacuation {
            from: from.to_owned(),
            eligible: eligible.to_vec(),
        };
        if let Some(number) = self.evacuations.repeats(&evacuation) {
            return Ok(Reply::Evacuated {
                number,
                again: true,
            });
        }
        let number = self
            .evacuations
            .record::<ApplyError>(&mut self.cluster, evacuation)?;
        Ok(Reply::Evacuated {
            number,
            again: false,
        })
    }

    /// Moves `tenant` from `current` to `home` and `standbys`, one epoch on
    /// (its [`HOMES`] entry under the old home is left to the caller).
    fn move_tenant(
        &mut self,
        tenant: String,
        current: Placement,
        target: (String, Vec<String>),
    ) -> Result<MovedPlacement, ApplyError> {
        let placement = current.moved_to(target);
        self.put_placement(&tenant, &placement, false)?;
        Ok(MovedPlacement {
            tenant,
            from: current.home,
            placement,
        })
    }

    /// [`Op::MoveRegion`]: reads only the tenants homed in `from` (the
    /// [`HOMES`] index), so its cost is the tenants it moves.
    fn move_region(&mut self, from: &str, eligible: &[String]) -> Result<Reply, ApplyError> {
        self.write_out_evacuations()?;
        let (mut moved, mut stranded) = (Vec::new(), Vec::new());
        for tenant in tenants_homed_in(&self.homes, from)? {
            let Some(current) = self.placement(&tenant)? else {
                continue;
            };
            match current.failover_target(from, |r| eligible.iter().any(|e| e == r)) {
                Some(target) => moved.push(self.move_tenant(tenant, current, target)?),
                None => stranded.push(tenant),
            }
        }
        if !moved.is_empty() {
            // Every tenant listed under `from` left but the stranded ones.
            let prefix = home_prefix(from)?;
            let end = prefix_end(&prefix);
            let keep: std::collections::HashSet<&[u8]> =
                stranded.iter().map(|t| t.as_bytes()).collect();
            let stays = |k: &[u8]| keep.contains(&k[prefix.len()..]);
            match &end {
                Some(end) => self
                    .homes
                    .retain_in(prefix.as_slice()..end.as_slice(), |k, _| stays(k))?,
                None => self.homes.retain_in(prefix.as_slice().., |k, _| stays(k))?,
            }
        }
        Ok(Reply::Moved { moved, stranded })
    }

    /// [`Op::ReturnHome`]: a scan of every placement (the preferred home is
    /// not indexed: failback is an operator's, not a race against clients).
    fn return_home(&mut self, to: &str) -> Result<Reply, ApplyError> {
        self.write_out_evacuations()?;
        let mut away = Vec::new();
        for item in self.placements.iter()? {
            let (k, v) = item?;
            let placement = StoredPlacement::decode(v.value())?.placement;
            if placement.preferred_home == to && placement.home != to {
                away.push((String::from_utf8_lossy(k.value()).into_owned(), placement));
            }
        }
        let mut moved = Vec::with_capacity(away.len());
        for (tenant, current) in away {
            let target = current.failback_target();
            let from = current.home.clone();
            let back = self.move_tenant(tenant, current, target)?;
            self.homes
                .remove(home_key(&from, &back.tenant)?.as_slice())?;
            moved.push(back);
        }
        Ok(Reply::Moved {
            moved,
            stranded: Vec::new(),
        })
    }

    /// Applies one client request, exactly once per `(client, seq)`.
    pub fn apply(&mut self, req: &ClientRequest) -> Result<Reply, ApplyError> {
        let mut floor = sessions::floor_of(&self.floors, req.client)?;
        if req.seq < floor.floor {
            return Ok(Reply::StaleSequence);
        }
        let key = session_key(req.client, req.seq);
        if let Some(stored) = Self::get::<Reply>(&self.sessions, &key)? {
            return Ok(stored);
        }
        let reply = self.execute(req.now, &req.op)?;
        self.sessions
            .insert(key.as_slice(), encode(&reply)?.as_slice())?;
        let mut changed = false;
        let new_floor = req.acked_below.min(req.seq);
        if new_floor > floor.floor {
            sessions::forget_replies(&mut self.sessions, req.client, floor.floor, new_floor)?;
            floor.floor = new_floor;
            changed = true;
        }
        // From wire version 2 every member records when each client was
        // last seen, so all of them forget the same idle clients.
        if self.wire_version >= 2 && floor.seen_is_stale(req.now) {
            floor.last_seen = Some(req.now);
            changed = true;
        }
        if changed {
            sessions::put_floor(&mut self.floors, req.client, floor)?;
        }
        Ok(reply)
    }

    /// [`Op::RaiseWireVersion`]: never back. Moving to 2 stamps every
    /// client known so far as seen now.
    fn raise_wire_version(&mut self, now: Millis, version: u16) -> Result<Reply, ApplyError> {
        if version > self.wire_version {
            if self.wire_version < 2 && version >= 2 {
                sessions::stamp_unseen(&mut self.floors, now)?;
            }
            self.cluster
                .insert(WIRE_VERSION_KEY, version.to_be_bytes().as_slice())?;
            self.wire_version = version;
        }
        Ok(Reply::Ok)
    }

    /// [`Op::ForgetIdleClients`]; forgets nothing before wire version 2,
    /// when no member records when clients were seen.
    fn forget_idle_clients(
        &mut self,
        now: Millis,
        idle_ms: i64,
        limit: u32,
    ) -> Result<Reply, ApplyError> {
        if self.wire_version < 2 {
            return Ok(Reply::Count(0));
        }
        let idle = sessions::idle_clients(&self.floors, now, idle_ms, limit as usize)?;
        sessions::forget_clients(&mut self.sessions, &mut self.floors, &idle)?;
        Ok(Reply::Count(idle.len() as u64))
    }

    fn execute(&mut self, now: Millis, op: &Op) -> Result<Reply, ApplyError> {
        if let Some(region) = known_regions::first_unknown(&self.known_regions, &op.regions_named())
        {
            return Ok(Reply::UnknownRegion {
                region: region.to_owned(),
            });
        }
        match op {
            Op::Claim(claim) => self.claim(now, claim),
            Op::Complete {
                scope,
                fence,
                response,
                expires_after_ms,
            } => self.owner_write(scope, *fence, |r| {
                r.status = Status::Completed;
                r.step = Step::Completed;
                r.response = Some(response.clone());
                r.error_code = None;
                r.expires_at = Some(now.saturating_add(*expires_after_ms));
                r.updated_at = now;
            }),
            Op::Fail {
                scope,
                fence,
                replayable,
                response,
                error_code,
                expires_after_ms,
            } => self.owner_write(scope, *fence, |r| {
                r.status = if *replayable {
                    Status::FailedReplayable
                } else {
                    Status::FailedRetryable
                };
                r.response = response.clone();
                r.error_code = error_code.clone();
                r.expires_at = Some(now.saturating_add(*expires_after_ms));
                r.updated_at = now;
            }),
            Op::AdvanceStep { scope, fence, step } => self.owner_write(scope, *fence, |r| {
                // Recovery points only move forward.
                r.step = r.step.max(*step);
                r.updated_at = now;
            }),
            Op::MarkUnknown {
                scope,
                fence,
                retry_after_ms,
            } => self.owner_write(scope, *fence, |r| {
                r.status = Status::UnknownRequiresRecovery;
                r.locked_until = now.saturating_add(*retry_after_ms);
                r.updated_at = now;
            }),
            Op::Resolve {
                scope,
                fence,
                completed,
                response,
                expires_after_ms,
            } => {
                match self.record(scope)? {
                    Some(r) if r.status != Status::UnknownRequiresRecovery => {
                        return Ok(Reply::Fenced { current: Some(r) });
                    }
                    _ => {}
                }
                self.owner_write(scope, *fence, |r| {
                    if *completed {
                        r.status = Status::Completed;
                        r.step = Step::Completed;
                    } else {
                        r.status = Status::FailedReplayable;
                    }
                    r.response = Some(response.clone());
                    r.expires_at = Some(now.saturating_add(*expires_after_ms));
                    r.updated_at = now;
                })
            }
            Op::TakeOver {
                scope,
                fence,
                kind,
                region,
                lease_ms,
                renew,
            } => self.take_over(now, scope, *fence, *kind, region, *lease_ms, renew.as_ref()),
            Op::Expire {
                limit,
                retention_ms,
            } => self.expire(now, *limit, *retention_ms),
            Op::Purge { limit } => self.purge(now, *limit),
            Op::SetPlacement {
                tenant,
                expected_epoch,
                home,
                standbys,
            } => {
                if let Some(other) = self.lives_elsewhere(tenant)? {
                    return Ok(other);
                }
                let current = self.placement(tenant)?;
                let epoch = current.as_ref().map_or(0, |p| p.epoch);
                if epoch != *expected_epoch {
                    return Ok(Reply::PlacementConflict { current });
                }
                let placement = Placement {
                    home: home.clone(),
                    standbys: standbys.clone(),
                    epoch: epoch + 1,
                    // The first placement names the tenant's preferred home;
                    // failovers move `home`, failback returns to this.
                    preferred_home: current
                        .as_ref()
                        .map_or_else(|| home.clone(), |p| p.preferred_home.clone()),
                };
                self.put_placement(tenant, &placement, true)?;
                Ok(Reply::Placement(placement))
            }
            Op::MoveRegion { from, eligible } => self.move_region(from, eligible),
            Op::ReturnHome { to } => self.return_home(to),
            Op::EvacuateRegion { from, eligible } => self.evacuate_region(from, eligible),
            Op::AssignTenant { tenant, group } => self.assign_tenant(tenant, group),
            Op::DeclareRegions { regions } => {
                known_regions::declare(&mut self.cluster, regions)?;
                self.known_regions.extend(regions.iter().cloned());
                Ok(Reply::Ok)
            }
            Op::RaiseWireVersion { version } => self.raise_wire_version(now, *version),
            Op::ForgetIdleClients { idle_ms, limit } => {
                self.forget_idle_clients(now, *idle_ms, *limit)
            }
            Op::SetRegionStatus { region, status } => {
                self.regions
                    .insert(region.as_bytes(), encode(status)?.as_slice())?;
                Ok(Reply::Ok)
            }
            Op::Reseal {
                scope,
                fence,
                updated_at,
                seen_payload,
                seen_response,
                payload,
                response,
            } => {
                let Some(mut record) = self.record(scope)? else {
                    return Ok(Reply::NotFound);
                };
                // Unchanged since the re-encryptor read it, or it loses:
                // an owner's write always wins over a re-encryption.
                if record.fence != *fence
                    || record.updated_at != *updated_at
                    || &record.payload != seen_payload
                    || &record.response != seen_response
                    || payload.is_some() != seen_payload.is_some()
                    || response.is_some() != seen_response.is_some()
                {
                    return Ok(Reply::Fenced {
                        current: Some(record),
                    });
                }
                // Only the blobs change: not even `updated_at`, so a
                // re-encryption is invisible to every other rule.
                record.payload = payload.clone();
                record.response = response.clone();
                self.put_record(&record)?;
                Ok(Reply::Updated(record))
            }
        }
    }

    /// `OtherGroup` when this group's directory rows assign `tenant` to
    /// another group (docs/decisions/0063-a-raft-group-per-home-region.md).
    fn lives_elsewhere(&self, tenant: &str) -> Result<Option<Reply>, ApplyError> {
        Ok(directory::assignment_in(&self.cluster, tenant)?
            .map(|group| Reply::OtherGroup { group }))
    }

    /// [`Op::AssignTenant`]: only while this group holds nothing of the
    /// tenant, or already assigns it to the same group.
    fn assign_tenant(&mut self, tenant: &str, group: &str) -> Result<Reply, ApplyError> {
        match directory::assignment_in(&self.cluster, tenant)? {
            Some(assigned) if assigned == group => {
                return Ok(Reply::Assigned { group: assigned });
            }
            Some(assigned) => {
                return Ok(Reply::TenantInUse {
                    assigned: Some(assigned),
                });
            }
            None => {}
        }
        let tenant_prefix = encode(&tenant)?;
        let holds_any = self.placements.get(tenant.as_bytes())?.is_some()
            || directory::holds_prefix(&self.records, &tenant_prefix)?
            || directory::holds_prefix(&self.business_keys, &tenant_prefix)?;
        if holds_any {
            return Ok(Reply::TenantInUse { assigned: None });
        }
        directory::assign(&mut self.cluster, tenant, group)?;
        Ok(Reply::Assigned {
            group: group.to_owned(),
        })
    }

    /// The placement check: a claim counts only from the tenant's home at
    /// the current epoch. A tenant without a placement may be claimed from
    /// any region (single-region deployments never set one).
    fn misdirected(
        &self,
        tenant: &str,
        region: &str,
        epoch: u64,
    ) -> Result<Option<Reply>, ApplyError> {
        Ok(self.placement(tenant)?.and_then(|placement| {
            (placement.home != region || placement.epoch != epoch)
                .then_some(Reply::Misdirected { placement })
        }))
    }

    /// Reserves `key` for `scope`, or names the payment that holds it.
    fn reserve(
        &mut self,
        key: &BusinessKey,
        scope: &Scope,
        payment_id: &Option<String>,
    ) -> Result<Option<Reply>, ApplyError> {
        let k = encode(key)?;
        if let Some(held) = Self::get::<Reservation>(&self.business_keys, &k)? {
            // Held for good by the payment that took it: even the same
            // scoped key, renewed past its window, may not create another.
            if held.scope != *scope || held.payment_id != *payment_id {
                return Ok(Some(Reply::BusinessKeyTaken {
                    payment_id: held.payment_id,
                    scope: held.scope,
                }));
            }
            return Ok(None);
        }
        let reservation = Reservation {
            payment_id: payment_id.clone(),
            scope: scope.clone(),
        };
        self.business_keys
            .insert(k.as_slice(), encode(&reservation)?.as_slice())?;
        Ok(None)
    }

    fn claim(&mut self, now: Millis, c: &NewClaim) -> Result<Reply, ApplyError> {
        // An existing record is answered from any region: it creates
        // nothing, and replays must work wherever the client lands. Only a
        // claim that would create a record must come from the home region.
        if let Some(existing) = self.record(&c.scope)? {
            return Ok(Reply::Existing(existing));
        }
        if let Some(other) = self.lives_elsewhere(&c.scope.tenant)? {
            return Ok(other);
        }
        if let Some(reply) = self.misdirected(&c.scope.tenant, &c.region, c.epoch)? {
            return Ok(reply);
        }
        if let Some(key) = &c.business_key
            && let Some(taken) = self.reserve(key, &c.scope, &c.payment_id)?
        {
            return Ok(taken);
        }
        let record = Record {
            scope: c.scope.clone(),
            fingerprint_version: c.fingerprint_version,
            fingerprint: c.fingerprint.clone(),
            status: Status::InProgress,
            step: c.step,
            fence: 1,
            locked_until: now.saturating_add(c.lease_ms),
            payment_id: c.payment_id.clone(),
            provider_key: c.provider_key.clone(),
            business_key: c.business_key.clone(),
            payload: c.payload.clone(),
            response: None,
            error_code: None,
            trace_id: c.trace_id.clone(),
            region: c.region.clone(),
            takeovers: 0,
            created_at: now,
            updated_at: now,
            expires_at: None,
            purge_after: None,
        };
        self.put_record(&record)?;
        Ok(Reply::Claimed(record))
    }

    /// A write by the record's owner: applies only if `fence` is the
    /// record's fence and the record is unfinished, so a stale owner (taken
    /// over, or racing a completion) changes nothing (I6).
    fn owner_write(
        &mut self,
        scope: &Scope,
        fence: u64,
        change: impl FnOnce(&mut Record),
    ) -> Result<Reply, ApplyError> {
        let Some(mut record) = self.record(scope)? else {
            return Ok(Reply::NotFound);
        };
        if record.fence != fence || !record.status.is_unfinished() {
            return Ok(Reply::Fenced {
                current: Some(record),
            });
        }
        change(&mut record);
        self.put_record(&record)?;
        Ok(Reply::Updated(record))
    }

    #[allow(clippy::too_many_arguments)]
    fn take_over(
        &mut self,
        now: Millis,
        scope: &Scope,
        fence: u64,
        kind: TakeOverKind,
        region: &str,
        lease_ms: i64,
        renew: Option<&NewClaim>,
    ) -> Result<Reply, ApplyError> {
        let Some(mut record) = self.record(scope)? else {
            return Ok(Reply::NotFound);
        };
        if record.fence != fence {
            return Ok(Reply::Fenced {
                current: Some(record),
            });
        }
        // A renewed key is a new operation: it must come from the home
        // region. A lease takeover may come from anywhere (after a failover
        // the new home resumes what the old one left).
        if let Some(c) = renew
            && let Some(reply) = self.misdirected(&scope.tenant, &c.region, c.epoch)?
        {
            return Ok(reply);
        }
        match kind {
            TakeOverKind::LeaseExpired => {
                if !record.status.is_unfinished() {
                    return Ok(Reply::Fenced {
                        current: Some(record),
                    });
                }
                // An unknown outcome may be taken over before its recovery
                // backoff ends: a client retry does not wait for it.
                if record.status == Status::InProgress && !record.lease_expired(now) {
                    return Ok(Reply::LeaseValid {
                        locked_until: record.locked_until,
                    });
                }
            }
            TakeOverKind::Restart => {
                if record.status != Status::FailedRetryable || record.is_expired(now) {
                    return Ok(Reply::Fenced {
                        current: Some(record),
                    });
                }
                record.response = None;
                record.error_code = None;
                record.expires_at = None;
            }
            TakeOverKind::Renew => {
                if !record.is_expired(now) {
                    return Ok(Reply::Fenced {
                        current: Some(record),
                    });
                }
                record.response = None;
                record.error_code = None;
                record.expires_at = None;
                record.purge_after = None;
            }
        }
        if let Some(c) = renew
            && (kind == TakeOverKind::Renew || record.payment_id.is_none())
        {
            if let Some(key) = &c.business_key
                && let Some(taken) = self.reserve(key, &c.scope, &c.payment_id)?
            {
                return Ok(taken);
            }
            if kind == TakeOverKind::Renew {
                record.fingerprint_version = c.fingerprint_version;
                record.fingerprint = c.fingerprint.clone();
                record.trace_id = c.trace_id.clone();
                record.created_at = now;
            }
            record.step = c.step;
            record.payment_id = c.payment_id.clone();
            record.provider_key = c.provider_key.clone();
            record.business_key = c.business_key.clone();
            record.payload = c.payload.clone();
        }
        record.status = Status::InProgress;
        record.fence += 1;
        record.takeovers += 1;
        record.locked_until = now.saturating_add(lease_ms);
        record.region = region.to_owned();
        record.updated_at = now;
        self.put_record(&record)?;
        Ok(Reply::Claimed(record))
    }

    /// The scopes of up to `limit` records whose [`DUE`] entry of `kind`
    /// is at or before `now`, oldest first.
    fn due(&self, kind: u8, now: Millis, limit: u32) -> Result<Vec<Vec<u8>>, ApplyError> {
        let (from, to) = (due_prefix(kind, 0), due_prefix(kind, now.saturating_add(1)));
        let mut scopes = Vec::new();
        for item in self.due.range(from.as_slice()..to.as_slice())? {
            if scopes.len() >= limit as usize {
                break;
            }
            let (k, _) = item?;
            scopes.push(k.value()[9..].to_vec());
        }
        Ok(scopes)
    }

    /// Marks up to `limit` records past their replay window `EXPIRED`,
    /// dropping their answers and payloads (the payload holds the payment's
    /// facts: nothing sealed outlives the replay window); reads only the
    /// records that are due.
    fn expire(&mut self, now: Millis, limit: u32, retention_ms: i64) -> Result<Reply, ApplyError> {
        let mut n = 0;
        for key in self.due(DUE_TO_EXPIRE, now, limit)? {
            let Some(mut record) = Self::get::<Record>(&self.records, &key)? else {
                continue;
            };
            if record.status == Status::Expired || !record.is_expired(now) {
                continue;
            }
            record.status = Status::Expired;
            record.response = None;
            record.payload = None;
            record.purge_after = Some(now.saturating_add(retention_ms));
            record.updated_at = now;
            self.put_record(&record)?;
            n += 1;
        }
        Ok(Reply::Count(n))
    }

    /// Deletes up to `limit` expired records past their retention. Business
    /// keys stay reserved: they guard against a duplicate for good.
    fn purge(&mut self, now: Millis, limit: u32) -> Result<Reply, ApplyError> {
        let mut due = Vec::new();
        for key in self.due(DUE_TO_PURGE, now, limit)? {
            if let Some(record) = Self::get::<Record>(&self.records, &key)?
                && record.status == Status::Expired
                && record.purge_after.is_some_and(|at| at <= now)
            {
                due.push((key, record));
            }
        }
        let n = due.len() as u64;
        for (k, record) in due {
            self.records.remove(k.as_slice())?;
            if let Some(id) = &record.payment_id {
                self.payment_ids.remove(id.as_bytes())?;
            }
            if let Some(entry) = tenant_payment_entry(&record)? {
                self.tenant_payments.remove(entry.as_slice())?;
            }
            if let Some(entry) = due_entry(&record)? {
                self.due.remove(entry.as_slice())?;
            }
        }
        Ok(Reply::Count(n))
    }
}
