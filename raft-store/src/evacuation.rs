//! Evacuations: a region's failover as one entry whose apply costs the
//! same at any number of tenants (docs/decisions/0055-evacuations.md).
//!
//! An evacuation of region R ([`Op::EvacuateRegion`]) is stored once, in
//! the `cluster` table, under its number (1, 2, … in log order). Each
//! placement is stored with a *mark*: the number of the last evacuation
//! when it was written. Reading a placement applies, in order, every
//! evacuation after its mark whose region is the placement's home at that
//! point: the tenant goes to its first standby the evacuation allows
//! ([`Placement::failover_target`]), its epoch one on. That is exactly what
//! rewriting every placement when the evacuation applied would have left
//! (what [`Op::MoveRegion`] does), so every reader — the claim's placement
//! check, the client's reads, the router's table — sees the same placements
//! either way. A write stores the placement as read, with the current mark.
//!
//! ```text
//!  stored: acme → eu-west, epoch 4, mark 0       cluster: evacuation 1 = eu-west → [us-east, ap-south]
//!  read:   acme → us-east, epoch 5  (evacuation 1 applies: 1 > mark 0, home is eu-west)
//!  write:  acme → …, epoch 6, mark 1             (evacuation 1 no longer applies to it)
//! ```
//!
//! What reads every placement anyway — a failback ([`Op::ReturnHome`]), the
//! older per-tenant bulk move — first writes every placement as read and
//! forgets the evacuations ([`Evacuations::forget`]); the numbering goes
//! on, so a mark never names a later evacuation.
//!
//! A stored placement is its postcard bytes followed, when its mark is not
//! 0, by the mark (8 bytes, big-endian). postcard ignores bytes after a
//! value, so a build without evacuations reads the placement itself; and
//! until the cluster moves to wire version 4 no evacuation exists and no
//! mark is written, so the state is byte for byte the build before's.
//!
//! [`Op::EvacuateRegion`]: crate::command::Op::EvacuateRegion
//! [`Op::MoveRegion`]: crate::command::Op::MoveRegion
//! [`Op::ReturnHome`]: crate::command::Op::ReturnHome

use redb::{ReadableTable, Table};
use serde::{Deserialize, Serialize};

use crate::command::Placement;

type Bytes = &'static [u8];

/// In the `cluster` table: the number of the last evacuation ever applied
/// (u64 big-endian; absent: none).
const LAST_KEY: &[u8] = b"evacuations/last";
/// In the `cluster` table: the number of the last evacuation when a
/// placement was last written (u64 big-endian; absent: 0).
const WRITTEN_KEY: &[u8] = b"evacuations/written";
/// In the `cluster` table: `PREFIX ‖ number (u64 big-endian)` → an
/// [`Evacuation`] still applied on read.
const PREFIX: &[u8] = b"evacuations/n/";

/// One region's evacuation, as its entry named it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evacuation {
    pub from: String,
    pub eligible: Vec<String>,
}

impl Evacuation {
    /// Where `placement` goes if this evacuation applies to it.
    fn apply(&self, placement: Placement) -> Placement {
        if placement.home != self.from {
            return placement;
        }
        let eligible = |r: &str| self.eligible.iter().any(|e| e == r);
        match placement.failover_target(&self.from, eligible) {
            Some(target) => placement.moved_to(target),
            // No standby it allows: the tenant stays (stranded).
            None => placement,
        }
    }
}

/// A placement as the `placements` table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPlacement {
    pub placement: Placement,
    /// The last evacuation when it was written (0: none).
    pub mark: u64,
}

impl StoredPlacement {
    pub fn decode(bytes: &[u8]) -> Result<Self, postcard::Error> {
        let (placement, rest) = postcard::take_from_bytes::<Placement>(bytes)?;
        let mark = <[u8; 8]>::try_from(rest).map_or(0, u64::from_be_bytes);
        Ok(Self { placement, mark })
    }

    pub fn encode(placement: &Placement, mark: u64) -> Result<Vec<u8>, postcard::Error> {
        let mut bytes = postcard::to_allocvec(placement)?;
        if mark > 0 {
            bytes.extend_from_slice(&mark.to_be_bytes());
        }
        Ok(bytes)
    }
}

/// The evacuations a read still applies, in order, and the number of the
/// last one ever.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evacuations {
    last: u64,
    /// `last` when a placement was last written.
    written: u64,
    pending: Vec<(u64, Evacuation)>,
}

impl Evacuations {
    /// Reads them from the `cluster` table.
    pub fn load<E>(cluster: &impl ReadableTable<Bytes, Bytes>) -> Result<Self, E>
    where
        E: From<redb::StorageError> + From<postcard::Error>,
    {
        let number_at = |key: &[u8]| -> Result<u64, redb::StorageError> {
            Ok(cluster
                .get(key)?
                .and_then(|v| <[u8; 8]>::try_from(v.value()).ok())
                .map_or(0, u64::from_be_bytes))
        };
        let (last, written) = (number_at(LAST_KEY)?, number_at(WRITTEN_KEY)?);
        let mut pending = Vec::new();
        if last > 0 {
            for item in cluster.range(PREFIX..)? {
                let (k, v) = item?;
                let Some(number) = k.value().strip_prefix(PREFIX) else {
                    break;
                };
                let number = <[u8; 8]>::try_from(number).map_or(0, u64::from_be_bytes);
                pending.push((number, postcard::from_bytes(v.value())?));
            }
        }
        Ok(Self {
            last,
            written,
            pending,
        })
    }

    /// No evacuation applies to any read.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The mark a placement written now is stored with.
    pub fn mark(&self) -> u64 {
        self.last
    }

    /// The placement `stored` is now: every evacuation after its mark
    /// applied in order.
    pub fn resolve(&self, stored: StoredPlacement) -> Placement {
        self.pending
            .iter()
            .filter(|(number, _)| *number > stored.mark)
            .fold(stored.placement, |p, (_, evacuation)| evacuation.apply(p))
    }

    /// Decodes a stored placement and resolves it.
    pub fn read(&self, bytes: &[u8]) -> Result<Placement, postcard::Error> {
        Ok(self.resolve(StoredPlacement::decode(bytes)?))
    }

    /// The number of the last evacuation if `evacuation` would repeat it:
    /// the same region, no region allowed that it did not allow, and no
    /// placement written since. Applying it would then move no one (every
    /// tenant the last could move has left the region; the ones it
    /// stranded have no standby this one allows either), so it need not
    /// be recorded.
    pub fn repeats(&self, evacuation: &Evacuation) -> Option<u64> {
        let (number, last) = self.pending.last()?;
        let repeats = *number == self.last
            && self.written < self.last
            && last.from == evacuation.from
            && evacuation
                .eligible
                .iter()
                .all(|r| last.eligible.contains(r));
        repeats.then_some(*number)
    }

    /// Notes that a placement is being written (with [`Self::mark`]).
    pub fn placement_written(
        &mut self,
        cluster: &mut Table<'_, Bytes, Bytes>,
    ) -> Result<(), redb::StorageError> {
        if self.written < self.last {
            cluster.insert(WRITTEN_KEY, self.last.to_be_bytes().as_slice())?;
            self.written = self.last;
        }
        Ok(())
    }

    /// Records `evacuation` as the next one; returns its number.
    pub fn record<E>(
        &mut self,
        cluster: &mut Table<'_, Bytes, Bytes>,
        evacuation: Evacuation,
    ) -> Result<u64, E>
    where
        E: From<redb::StorageError> + From<postcard::Error>,
    {
        let number = self.last + 1;
        let value = postcard::to_allocvec(&evacuation)?;
        cluster.insert(key(number).as_slice(), value.as_slice())?;
        cluster.insert(LAST_KEY, number.to_be_bytes().as_slice())?;
        self.last = number;
        self.pending.push((number, evacuation));
        Ok(number)
    }

    /// Forgets every evacuation: only once every placement they would
    /// change has been written as read (with a mark at or past them all).
    pub fn forget(
        &mut self,
        cluster: &mut Table<'_, Bytes, Bytes>,
    ) -> Result<(), redb::StorageError> {
        for (number, _) in self.pending.drain(..) {
            cluster.remove(key(number).as_slice())?;
        }
        Ok(())
    }
}

fn key(number: u64) -> Vec<u8> {
    let mut key = PREFIX.to_vec();
    key.extend_from_slice(&number.to_be_bytes());
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(home: &str, standbys: &[&str], epoch: u64) -> Placement {
        Placement {
            home: home.into(),
            standbys: standbys.iter().map(|s| s.to_string()).collect(),
            epoch,
            preferred_home: home.into(),
        }
    }

    fn evacuation(from: &str, eligible: &[&str]) -> Evacuation {
        Evacuation {
            from: from.into(),
            eligible: eligible.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_placement_without_a_mark_is_the_build_befores_bytes() {
        let p = placement("eu", &["us", "ap"], 3);
        let bare = StoredPlacement::encode(&p, 0).unwrap();
        assert_eq!(bare, postcard::to_allocvec(&p).unwrap());
        let marked = StoredPlacement::encode(&p, 7).unwrap();
        assert_eq!(StoredPlacement::decode(&marked).unwrap().mark, 7);
        // What a build without evacuations reads from a marked placement.
        assert_eq!(postcard::from_bytes::<Placement>(&marked).unwrap(), p);
    }

    #[test]
    fn evacuations_after_the_mark_apply_in_order() {
        let evacuations = Evacuations {
            last: 2,
            written: 0,
            pending: vec![
                (1, evacuation("eu", &["us", "ap"])),
                (2, evacuation("us", &["ap"])),
            ],
        };
        let stored = |mark| StoredPlacement {
            placement: placement("eu", &["us", "ap"], 3),
            mark,
        };
        // Both apply: eu → us (epoch 4), then us → ap (epoch 5).
        let twice = evacuations.resolve(stored(0));
        assert_eq!((twice.home.as_str(), twice.epoch), ("ap", 5));
        assert_eq!(twice.standbys, ["eu", "us"]);
        assert_eq!(twice.preferred_home, "eu");
        // Written after the first: only the second could apply, and it is
        // not homed in us.
        assert_eq!(evacuations.resolve(stored(1)), stored(1).placement);
        assert_eq!(evacuations.resolve(stored(2)), stored(2).placement);
    }

    #[test]
    fn a_tenant_no_standby_may_take_stays() {
        let evacuations = Evacuations {
            last: 1,
            written: 0,
            pending: vec![(1, evacuation("eu", &["ap"]))],
        };
        let p = placement("eu", &["us"], 3);
        assert_eq!(
            evacuations.resolve(StoredPlacement {
                placement: p.clone(),
                mark: 0
            }),
            p
        );
    }
}
