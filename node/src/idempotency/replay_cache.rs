//! A node-local cache of finished records, so a replay costs no database
//! round trip.
//!
//! Safe because a finished record (`COMPLETED`, `FAILED_REPLAYABLE`) never
//! changes until its replay window ends: no owner can write to it (writes
//! are fenced to unfinished records) and only expiry frees the key. Every
//! hit is checked against the window, so an entry outliving its record's
//! window is never served; from then on the store decides. The cache is
//! bounded by the bytes of the bodies it holds.

use std::sync::Arc;

use moka::sync::Cache;

use super::record::{Record, Scope};
use crate::domain::UnixMillis;

#[derive(Debug, Clone)]
pub struct ReplayCache {
    records: Cache<Scope, Arc<Record>>,
}

impl ReplayCache {
    pub fn new(max_bytes: u64) -> Self {
        let records = Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|_, r: &Arc<Record>| {
                let body = r.response.as_ref().map_or(0, |resp| resp.body.len());
                u32::try_from(body + 512).unwrap_or(u32::MAX)
            })
            .build();
        Self { records }
    }

    /// A finished record still inside its window, if cached.
    pub fn get(&self, scope: &Scope, now: UnixMillis) -> Option<Arc<Record>> {
        let record = self.records.get(scope)?;
        if record.is_expired(now) {
            self.records.invalidate(scope);
            return None;
        }
        Some(record)
    }

    /// Remembers `record` if it is finished and replayable; anything else
    /// can still change and is never cached.
    pub fn remember(&self, record: &Record) {
        if record.status.is_replayable() && record.response.is_some() && record.expires_at.is_some()
        {
            self.records
                .insert(record.scope.clone(), Arc::new(record.clone()));
        }
    }
}
