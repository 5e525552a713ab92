//! The placement cache: every tenant's placement, read from raft-store.
//!
//! The whole table is re-read every `--placement-refresh` and at once when
//! a node answers 421 (then the one tenant first, so the retry does not
//! wait for the full read). A stale entry costs one 421 and a retry, never
//! a wrong answer: the node fences by placement, the router only guesses.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use once_store_client::client::ClientError;
use once_store_client::command::Placement;
use once_store_client::groups::StoreGroups;
use tokio::sync::Notify;

use crate::metrics::Metrics;

#[derive(Debug)]
pub struct PlacementCache {
    /// The whole table's reads, on the control runtime.
    store: Arc<StoreGroups>,
    /// One tenant's read on a request's path (after a 421), on the public
    /// runtime: a client of its own, so the refresher never waits on a
    /// connection that runtime drives.
    lookups: Arc<StoreGroups>,
    /// A std lock: held only to copy in or out, never across an await.
    /// Shared placements: tenants moved together by an evacuation point at
    /// one.
    by_tenant: RwLock<HashMap<String, Arc<Placement>>>,
    /// Set by the first full read; `/readyz` waits for it.
    loaded: AtomicBool,
    /// Wakes the refresher early (a 421 was seen).
    refresh_now: Notify,
}

impl PlacementCache {
    pub fn new(store: Arc<StoreGroups>, lookups: Arc<StoreGroups>) -> Self {
        Self {
            store,
            lookups,
            by_tenant: RwLock::new(HashMap::new()),
            loaded: AtomicBool::new(false),
            refresh_now: Notify::new(),
        }
    }

    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// The cached placement of `tenant`.
    pub fn get(&self, tenant: &str) -> Option<Placement> {
        self.read().get(tenant).map(|p| Placement::clone(p))
    }

    /// Every cached placement, sorted by tenant.
    pub fn all(&self) -> Vec<(String, Placement)> {
        let mut all: Vec<_> = self
            .read()
            .iter()
            .map(|(t, p)| (t.clone(), Placement::clone(p)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Tenants whose cached home is `region`.
    pub fn homed_in(&self, region: &str) -> Vec<String> {
        self.read()
            .iter()
            .filter(|(_, p)| p.home == region)
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// The cached placements homed in `region`, as they are now: what an
    /// evacuation sent now moves, kept in case its answer is lost and the
    /// table refreshed before the write is answered again
    /// ([`crate::failover`], RELIABILITY.md finding 21).
    pub fn homed_snapshot(&self, region: &str) -> Vec<(String, Arc<Placement>)> {
        self.read()
            .iter()
            .filter(|(_, p)| p.home == region)
            .map(|(t, p)| (t.clone(), p.clone()))
            .collect()
    }

    /// Applies an evacuation of `region` to the cache, in place and under
    /// one lock, by the rule raft-store now reads those placements by
    /// ([`Placement::failover_target`], epoch + 1): the first standby
    /// `eligible` accepts becomes home; a tenant none accepts stays. What
    /// the evacuation moved is the caller's to tell (the placements homed
    /// there when it was sent, `crate::failover`), not what the cache
    /// still shows.
    ///
    /// Tenants placed alike move alike: each distinct placement is moved
    /// once and shared, so the lock is held for a hash lookup per tenant.
    pub fn evacuate(&self, region: &str, eligible: impl Fn(&str) -> bool) {
        let mut moves: HashMap<Placement, Option<Arc<Placement>>> = HashMap::new();
        let mut map = self.write();
        for (_, placement) in map.iter_mut().filter(|(_, p)| p.home == region) {
            let target = match moves.get(placement.as_ref()) {
                Some(target) => target.clone(),
                None => {
                    let target = placement
                        .failover_target(region, &eligible)
                        .map(|target| Arc::new(placement.moved_to(target)));
                    moves.insert(Placement::clone(placement), target.clone());
                    target
                }
            };
            if let Some(target) = target {
                *placement = target;
            }
        }
    }

    /// Re-reads the whole table from the store: every group's placements
    /// (a tenant's is in the group it lives in, and only there).
    pub async fn refresh_all(&self, metrics: &Metrics) -> Result<(), ClientError> {
        let reads = self.store.all().map(|(_, group)| group.placements());
        let mut placements = Vec::new();
        for read in futures::future::join_all(reads).await {
            match read {
                Ok(p) => placements.extend(p),
                Err(e) => {
                    metrics.refresh_failures.inc();
                    return Err(e);
                }
            }
        }
        metrics.placements.set(placements.len() as i64);
        let mut fresh: HashMap<String, Arc<Placement>> = placements
            .into_iter()
            .map(|(tenant, p)| (tenant, Arc::new(p)))
            .collect();
        let mut map = self.write();
        // A failover this router wrote while the read was in flight may be
        // newer than the table just read: keep the higher epoch.
        for (tenant, cached) in map.drain() {
            if let Some(read) = fresh.get_mut(&tenant)
                && read.epoch < cached.epoch
            {
                *read = cached;
            }
        }
        *map = fresh;
        drop(map);
        self.loaded.store(true, Ordering::Release);
        Ok(())
    }

    /// Re-reads one tenant (after a 421) and asks for a full refresh soon.
    pub async fn refresh_tenant(&self, tenant: &str) -> Result<Option<Placement>, ClientError> {
        self.refresh_now.notify_one();
        let placement = self
            .lookups
            .of_tenant(tenant)
            .await?
            .placement(tenant)
            .await?;
        self.remember(tenant, placement.clone());
        Ok(placement)
    }

    /// Records a placement learnt from a write (a failover this router made).
    /// An older epoch never replaces a newer one.
    pub fn remember(&self, tenant: &str, placement: Option<Placement>) {
        let mut map = self.write();
        match placement {
            Some(p) => {
                if map.get(tenant).is_none_or(|old| old.epoch <= p.epoch) {
                    map.insert(tenant.to_owned(), Arc::new(p));
                }
            }
            None => {
                map.remove(tenant);
            }
        }
    }

    /// Records the placements a bulk move answered, under one lock.
    pub fn remember_all<'a>(&self, placements: impl Iterator<Item = (&'a str, Placement)>) {
        let mut map = self.write();
        for (tenant, p) in placements {
            if map.get(tenant).is_none_or(|old| old.epoch <= p.epoch) {
                map.insert(tenant.to_owned(), Arc::new(p));
            }
        }
    }

    /// Refreshes every `interval`, or sooner when a 421 asks. Runs until
    /// the task is aborted.
    pub async fn keep_fresh(self: Arc<Self>, interval: Duration, metrics: Arc<Metrics>) {
        loop {
            if let Err(e) = self.refresh_all(&metrics).await {
                tracing::warn!(error = %e, "placement refresh failed; serving the cached table");
            }
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = self.refresh_now.notified() => {}
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Placement>>> {
        // A panic while holding the lock cannot leave the map half-written
        // (every write replaces whole entries), so poisoning is ignored.
        self.by_tenant.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Placement>>> {
        self.by_tenant.write().unwrap_or_else(|p| p.into_inner())
    }
}
