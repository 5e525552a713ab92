//! Partitions of the chaos drill, in the project's own transports: each
//! shape becomes a list of partition switches (store members' and the
//! router's `/admin/partition`), and every cut is checked where it acts — a
//! store member asked by a client declaring a cut region must refuse it
//! with `503` and `X-Once-Partitioned` — before the cut counts as applied.
//!
//! | shape | switches |
//! |---|---|
//! | isolate R | R's member isolated; every other member and the router cut R |
//! | bridge a–b via c | a's member cuts b, b's member cuts a; c untouched |
//! | one way, a refuses b | a's member refuses b (b's traffic to a is refused, a's to b flows) |
//!
//! Healing halfway heals the first half of the switches, waits, then the
//! rest: for a while the partition is partial.

use once_store_client::protocol::STATUS_PATH;
use once_store_client::wan::{CLIENT_REGION_HEADER, PARTITIONED_HEADER};

use crate::chaos::nemesis::PartitionShape;
use crate::cluster::Cluster;
use crate::fault::{HttpSwitch, PartitionSwitch};

/// A store member that must refuse clients declaring `refuses` while the
/// partition holds.
#[derive(Debug, Clone)]
pub struct Probe {
    pub member_region: String,
    pub api_url: String,
    pub refuses: String,
}

/// The switches of one partition, and where to see it act.
#[derive(Debug)]
pub struct Plan {
    pub switches: Vec<HttpSwitch>,
    pub probes: Vec<Probe>,
}

/// The switches and probes of `shape` in `cluster`.
pub fn plan(
    shape: &PartitionShape,
    cluster: &Cluster,
    http: &reqwest::Client,
) -> anyhow::Result<Plan> {
    let member = |region: &str| -> anyhow::Result<(String, String)> {
        let store = cluster
            .regions
            .iter()
            .find(|r| r.name == region)
            .and_then(|r| r.store.as_ref())
            .ok_or_else(|| anyhow::anyhow!("region {region} has no store member"))?;
        Ok((store.admin().to_owned(), store.api_url.clone()))
    };
    let token = cluster.store_operator_token();
    let probe = |member_region: &str, api_url: &str, refuses: &str| Probe {
        member_region: member_region.to_owned(),
        api_url: api_url.to_owned(),
        refuses: refuses.to_owned(),
    };
    let mut switches = Vec::new();
    let mut probes = Vec::new();
    match shape {
        PartitionShape::Isolate { region } => {
            let (admin, api) = member(region)?;
            switches.push(HttpSwitch::isolate_store_member(
                &admin,
                token,
                http.clone(),
            ));
            for other in cluster.regions.iter().filter(|r| &r.name != region) {
                let (other_admin, other_api) = member(&other.name)?;
                probes.push(probe(region, &api, &other.name));
                probes.push(probe(&other.name, &other_api, region));
                switches.push(HttpSwitch::store_member_cutting(
                    &other_admin,
                    token,
                    region,
                    http.clone(),
                ));
            }
            switches.push(HttpSwitch::router_cutting(
                cluster.router.admin(),
                cluster.router_admin_token(),
                region,
                http.clone(),
            ));
        }
        PartitionShape::Bridge { a, b, .. } => {
            for (from, cut) in [(a, b), (b, a)] {
                let (admin, api) = member(from)?;
                switches.push(HttpSwitch::store_member_cutting(
                    &admin,
                    token,
                    cut,
                    http.clone(),
                ));
                probes.push(probe(from, &api, cut));
            }
        }
        PartitionShape::OneWay { refusing, from } => {
            let (admin, api) = member(refusing)?;
            switches.push(HttpSwitch::store_member_refusing(
                &admin,
                token,
                from,
                http.clone(),
            ));
            probes.push(probe(refusing, &api, from));
        }
    }
    Ok(Plan { switches, probes })
}

/// Asks the probe's member for its status as a client of the refused
/// region: `Ok(true)` when refused as a partition refuses (`503` +
/// `X-Once-Partitioned`), `Ok(false)` when served.
pub async fn refused(http: &reqwest::Client, probe: &Probe) -> anyhow::Result<bool> {
    let response = http
        .get(format!(
            "{}{STATUS_PATH}",
            probe.api_url.trim_end_matches('/')
        ))
        .header(CLIENT_REGION_HEADER, &probe.refuses)
        .send()
        .await?;
    let status = response.status().as_u16();
    let partitioned = response.headers().contains_key(PARTITIONED_HEADER);
    anyhow::ensure!(
        status == 503 && partitioned || (200..300).contains(&status),
        "{} answered {status} to a client of {}",
        probe.api_url,
        probe.refuses
    );
    Ok(status == 503 && partitioned)
}

/// Cuts every switch; on the first failure heals those already cut, so a
/// half-applied partition is never left behind. Answers what was done.
pub async fn cut(plan: &Plan) -> Result<Vec<String>, (Vec<String>, String)> {
    let mut done = Vec::new();
    for (i, switch) in plan.switches.iter().enumerate() {
        if let Err(e) = switch.cut().await {
            for undo in &plan.switches[..i] {
                let _ = undo.heal().await;
            }
            return Err((done, format!("cutting {}: {e}; undone", switch.describe())));
        }
        done.push(format!("cut: {}", switch.describe()));
    }
    Ok(done)
}

/// Heals `switches`, answering what was done and the failures.
pub async fn heal(switches: &[HttpSwitch]) -> (Vec<String>, Vec<String>) {
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for switch in switches {
        match switch.heal().await {
            Ok(()) => done.push(format!("healed: {}", switch.describe())),
            Err(e) => failed.push(format!("healing {}: {e}", switch.describe())),
        }
    }
    (done, failed)
}
