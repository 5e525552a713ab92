//! `once store place`: seeds many first placements at once (`PREFIX-0000000`
//! … homed in one region), `concurrency` compare-and-sets in flight through
//! one operator client. What `bench/failover.sh` uses to home 100,000
//! tenants in the region it kills. A tenant that already has a placement
//! keeps it. In a deployment with a group per home region each tenant goes
//! to its home's group (`StoreGroups::place_first`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use once_store_client::command::Reply;
use once_store_client::groups::StoreGroups;
use serde::Serialize;

/// What one seeding did.
#[derive(Debug, Serialize)]
pub struct PlaceReport {
    pub placed: usize,
    /// Already placed (kept as they were).
    pub existing: usize,
    pub seconds: f64,
}

/// Places `count` tenants named `{prefix}-{i:07}` in `home` with `standbys`,
/// through `client` (an operator's).
pub async fn place(
    client: StoreGroups,
    prefix: &str,
    count: usize,
    home: &str,
    standbys: &[String],
    concurrency: usize,
) -> anyhow::Result<PlaceReport> {
    let client = Arc::new(client);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency.max(1))
        .map(|_| {
            let (client, next) = (client.clone(), next.clone());
            let (prefix, home, standbys) = (prefix.to_owned(), home.to_owned(), standbys.to_vec());
            tokio::spawn(async move {
                let (mut placed, mut existing) = (0, 0);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return Ok::<_, anyhow::Error>((placed, existing));
                    }
                    let tenant = format!("{prefix}-{i:07}");
                    match client.place_first(&tenant, &home, &standbys).await? {
                        Reply::Placement(_) => placed += 1,
                        Reply::PlacementConflict { .. } => existing += 1,
                        other => anyhow::bail!("placing {tenant}: unexpected answer {other:?}"),
                    }
                }
            })
        })
        .collect();
    let (mut placed, mut existing) = (0, 0);
    for worker in workers {
        let (p, e) = worker.await??;
        placed += p;
        existing += e;
    }
    Ok(PlaceReport {
        placed,
        existing,
        seconds: started.elapsed().as_secs_f64(),
    })
}
