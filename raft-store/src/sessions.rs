//! The dedup table's bookkeeping per client: the floor below which its
//! replies are forgotten, when it was last seen, and forgetting a client
//! that has gone away.
//!
//! Every client command's reply is kept under `(client, seq)` in the
//! sessions table until the client reports it has the answer
//! (`acked_below`); the floors table keeps, per client, the lowest seq
//! still remembered. A client that disappears (its process restarted and
//! took a new id) leaves its floor and the replies it never acknowledged
//! behind, for ever: bounded by the number of restarts, not by traffic, but
//! never reclaimed.
//!
//! From wire version 2 on (docs/decisions/0041-wire-versions.md) a floor
//! also records when its client was last seen, by the leader's stamp, and
//! [`Op::ForgetIdleClients`](crate::command::Op::ForgetIdleClients)
//! forgets every client idle longer than the cluster's setting. The stamp
//! is refreshed at most once every [`SEEN_GRANULARITY_MS`], so an active
//! client costs no extra write per command. Before version 2 a floor is the
//! 8 bytes the build before wrote, and nothing is forgotten: members that
//! do not all track the same thing must not forget different things.

use redb::{ReadableTable, Table};

use crate::command::Millis;

type Bytes = &'static [u8];

/// How stale a client's last-seen stamp may grow before a command of it
/// rewrites it. Far below any idle limit worth setting (hours).
pub const SEEN_GRANULARITY_MS: Millis = 60_000;

/// The key of one reply in the sessions table: `client ‖ seq`, both 8
/// bytes big-endian, so a client's replies are one contiguous range.
pub(crate) fn session_key(client: u64, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&client.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// One client's entry in the floors table: `floor` (8 bytes big-endian),
/// then, from wire version 2 on, `last_seen` (8 more).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Floor {
    /// The lowest seq whose reply is still remembered.
    pub floor: u64,
    /// When the client's last command applied (leader's stamp, to
    /// [`SEEN_GRANULARITY_MS`]); `None` in an entry from before version 2.
    pub last_seen: Option<Millis>,
}

impl Floor {
    pub fn decode(bytes: &[u8]) -> Self {
        let word = |at: usize| {
            bytes
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes)
        };
        Self {
            floor: word(0).unwrap_or(0),
            last_seen: word(8).map(|w| w as Millis),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.floor.to_be_bytes().to_vec();
        if let Some(seen) = self.last_seen {
            out.extend_from_slice(&(seen as u64).to_be_bytes());
        }
        out
    }

    /// Whether a command at `now` should rewrite the last-seen stamp.
    pub fn seen_is_stale(&self, now: Millis) -> bool {
        self.last_seen
            .is_none_or(|seen| now.saturating_sub(seen) >= SEEN_GRANULARITY_MS)
    }
}

/// The client's floor entry (the default when it has none).
pub(crate) fn floor_of(
    floors: &Table<'_, Bytes, Bytes>,
    client: u64,
) -> Result<Floor, redb::StorageError> {
    Ok(floors
        .get(client.to_be_bytes().as_slice())?
        .map(|v| Floor::decode(v.value()))
        .unwrap_or_default())
}

pub(crate) fn put_floor(
    floors: &mut Table<'_, Bytes, Bytes>,
    client: u64,
    floor: Floor,
) -> Result<(), redb::StorageError> {
    floors.insert(client.to_be_bytes().as_slice(), floor.encode().as_slice())?;
    Ok(())
}

/// Forgets the replies of `client` from `from` (inclusive) to `to`
/// (exclusive).
pub(crate) fn forget_replies(
    sessions: &mut Table<'_, Bytes, Bytes>,
    client: u64,
    from: u64,
    to: u64,
) -> Result<(), redb::StorageError> {
    let (from, to) = (session_key(client, from), session_key(client, to));
    sessions.retain_in(from.as_slice()..to.as_slice(), |_, _| false)
}

/// Moving to wire version 2: every floor written before it gets `now` as
/// its last-seen stamp, so a client idle since before the move is forgotten
/// one idle limit after it, never sooner.
pub(crate) fn stamp_unseen(
    floors: &mut Table<'_, Bytes, Bytes>,
    now: Millis,
) -> Result<u64, redb::StorageError> {
    let mut unseen = Vec::new();
    for item in floors.iter()? {
        let (k, v) = item?;
        let floor = Floor::decode(v.value());
        if floor.last_seen.is_none() {
            unseen.push((k.value().to_vec(), floor));
        }
    }
    for (key, floor) in &unseen {
        let stamped = Floor {
            last_seen: Some(now),
            ..*floor
        };
        floors.insert(key.as_slice(), stamped.encode().as_slice())?;
    }
    Ok(unseen.len() as u64)
}

/// The clients (at most `limit`) last seen `idle_ms` or longer before
/// `now`, in client order. Reads every floor: there is one per client
/// process the cluster has served, a few thousand at most.
pub(crate) fn idle_clients(
    floors: &impl ReadableTable<Bytes, Bytes>,
    now: Millis,
    idle_ms: Millis,
    limit: usize,
) -> Result<Vec<u64>, redb::StorageError> {
    let mut idle = Vec::new();
    for item in floors.iter()? {
        if idle.len() >= limit {
            break;
        }
        let (k, v) = item?;
        let Ok(client) = <[u8; 8]>::try_from(k.value()) else {
            continue;
        };
        let seen = Floor::decode(v.value()).last_seen;
        if seen.is_some_and(|seen| now.saturating_sub(seen) >= idle_ms) {
            idle.push(u64::from_be_bytes(client));
        }
    }
    Ok(idle)
}

/// Forgets every reply and the floor of each client in `clients`.
pub(crate) fn forget_clients(
    sessions: &mut Table<'_, Bytes, Bytes>,
    floors: &mut Table<'_, Bytes, Bytes>,
    clients: &[u64],
) -> Result<(), redb::StorageError> {
    for &client in clients {
        let (first, last) = (session_key(client, 0), session_key(client, u64::MAX));
        sessions.retain_in(first.as_slice()..=last.as_slice(), |_, _| false)?;
        floors.remove(client.to_be_bytes().as_slice())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_of_the_build_before_reads_as_never_seen_and_round_trips() {
        let old = 7u64.to_be_bytes();
        let floor = Floor::decode(&old);
        assert_eq!(
            floor,
            Floor {
                floor: 7,
                last_seen: None
            }
        );
        assert_eq!(floor.encode(), old.to_vec());
        let seen = Floor {
            floor: 7,
            last_seen: Some(1_700_000_000_000),
        };
        assert_eq!(Floor::decode(&seen.encode()), seen);
    }

    #[test]
    fn the_stamp_is_rewritten_once_a_minute_at_most() {
        let floor = Floor {
            floor: 0,
            last_seen: Some(1_000_000),
        };
        assert!(!floor.seen_is_stale(1_000_000 + SEEN_GRANULARITY_MS - 1));
        assert!(floor.seen_is_stale(1_000_000 + SEEN_GRANULARITY_MS));
        assert!(Floor::default().seen_is_stale(0));
    }
}
