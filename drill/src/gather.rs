//! Collects the evidence from a live cluster, read-only: every regional
//! database's `payments` rows (sqlx `Any`, SQLite or PostgreSQL), the
//! provider's ledger (`GET /charges`) and raft-store's records (`GET
//! /admin/records`; postcard-encoded `Vec<Record>`, decoded with
//! raft-store's own types). Records are a member's *applied* state, so they
//! are read from the member that has applied the most: the leader (`GET
//! /api/status` names it), or without one the member with the highest
//! applied index — a follower that was just restarted or cut off may not
//! have caught up. A source that cannot be read becomes a gap in the
//! evidence (which fails the "evidence complete" check), not an aborted
//! drill.

use std::str::FromStr;
use std::sync::Once;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{ConnectOptions, Row};

use crate::client_log::ClientLog;
use crate::cluster::{Cluster, Region};
use crate::evidence::{BusinessKey, Charge, Evidence, PaymentRow, StoreRecord};

/// Reads every source; what fails is recorded in [`Evidence::gaps`].
pub async fn gather(cluster: &Cluster, log: ClientLog, http: &reqwest::Client) -> Evidence {
    let mut evidence = Evidence {
        log,
        ..Evidence::default()
    };
    for region in &cluster.regions {
        match payments_of(region).await {
            Ok(rows) => evidence.payments.extend(rows),
            Err(e) => evidence
                .gaps
                .push(format!("region {}'s database: {e:#}", region.name)),
        }
    }
    match ledger(&cluster.provider.url, http).await {
        Ok(ledger) => evidence.ledger = ledger,
        Err(e) => evidence.gaps.push(format!("the provider's ledger: {e:#}")),
    }
    let operator = match cluster.observer() {
        Ok(operator) => Some(operator),
        Err(e) => {
            evidence.gaps.push(format!("the store's operator: {e:#}"));
            None
        }
    };
    // raft-store holds answers sealed: without the nodes' key file they
    // cannot be compared (and say so).
    let keys = match &cluster.data_keys {
        Some(path) => match once_seal::KeyRing::load(path) {
            Ok(ring) => Some(ring),
            Err(e) => {
                evidence.gaps.push(format!(
                    "the data key file: {e}; stored answers not compared"
                ));
                None
            }
        },
        None => None,
    };
    let mut store_errors = Vec::new();
    // The directory's records, then every other group's (each member
    // serves group `g` under `/groups/g`), each from its best copy.
    let groups = std::iter::once(String::new()).chain(
        cluster
            .store_groups
            .iter()
            .map(|g| once_store_client::protocol::group_path(g)),
    );
    for (n, path) in groups.enumerate() {
        let mut statuses = Vec::new();
        for member in cluster.regions.iter().filter_map(|r| r.store.as_ref()) {
            let url = format!("{}{path}", member.admin().trim_end_matches('/'));
            let status = match &operator {
                Some(operator) => operator.status(&url).await.ok(),
                None => None,
            };
            statuses.push((url, status));
        }
        let mut read = None;
        for (url, why) in members_by_what_they_applied(statuses) {
            match store_records(&url, cluster.store_operator_token(), http, keys.as_ref()).await {
                Ok(records) => {
                    read = Some((records, format!("{url} ({why})")));
                    break;
                }
                Err(e) => store_errors.push(format!("{url} ({why}): {e:#}")),
            }
        }
        match read {
            Some((records, member)) => {
                if n == 0 {
                    evidence.store_member = Some(member);
                }
                evidence
                    .store_records
                    .get_or_insert_with(Vec::new)
                    .extend(records);
            }
            // A group unread: the records are not all there, so none are
            // compared.
            None => {
                evidence.store_records = None;
                store_errors.push(format!("group at {path:?}: no member answered"));
                break;
            }
        }
    }
    if !store_errors.is_empty() {
        // Even when a later member answered, the better copy was not read:
        // the records may lack what only it had applied.
        evidence.gaps.push(format!(
            "raft-store records ({}): {}",
            if evidence.store_records.is_some() {
                "read from a member that may lag"
            } else {
                "no member answered"
            },
            store_errors.join("; ")
        ));
    }
    evidence
}

/// The store members in the order their records are worth reading, each
/// with why: the one that says it leads first (of two that say so — an old
/// leader cut off does not know it was replaced — the one of the higher
/// term), then the others by applied index, highest first, then those whose
/// status could not be read (in the order given).
pub fn members_by_what_they_applied(
    members: Vec<(String, Option<once_store_client::protocol::Status>)>,
) -> Vec<(String, String)> {
    let mut ranked: Vec<_> = members
        .into_iter()
        .enumerate()
        .map(|(i, (url, status))| {
            let (leads, applied) = status
                .as_ref()
                .map_or((false, None), |s| (s.leader == Some(s.id), s.applied_index));
            let term_led = status.as_ref().filter(|_| leads).map_or(0, |s| s.term);
            let why = match (&status, leads) {
                (None, _) => "status unknown".to_owned(),
                (Some(_), true) => "leader".to_owned(),
                (Some(_), false) => format!(
                    "not the leader, applied index {}",
                    applied.map_or_else(|| "none".to_owned(), |a| a.to_string())
                ),
            };
            // Sort key: leader (the newest), then answered at all, then
            // applied index; ties keep the given order.
            let key = (
                !leads,
                std::cmp::Reverse(term_led),
                status.is_none(),
                std::cmp::Reverse(applied),
                i,
            );
            (key, url, why)
        })
        .collect();
    ranked.sort_by_key(|(key, _, _)| *key);
    ranked.into_iter().map(|(_, url, why)| (url, why)).collect()
}

/// `postgres://…`, `sqlite://PATH`, `sqlite:PATH` or a bare path, as the node
/// accepts it, turned into a read-only connection URL.
pub fn read_only_url(url: &str) -> String {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let separator = if url.contains('?') { '&' } else { '?' };
        return format!("{url}{separator}options=-c%20default_transaction_read_only%3Don");
    }
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    format!("sqlite://{path}?mode=ro")
}

/// Every row of one region's `payments` table.
pub async fn payments_of(region: &Region) -> anyhow::Result<Vec<PaymentRow>> {
    static DRIVERS: Once = Once::new();
    DRIVERS.call_once(sqlx::any::install_default_drivers);
    let options = AnyConnectOptions::from_str(&read_only_url(&region.database_url))?
        .disable_statement_logging();
    let pool = AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options)
        .await?;
    let rows = sqlx::query(
        "SELECT id, tenant_id, account_id, merchant_reference, amount_minor, currency, \
         status, provider_key, region FROM payments ORDER BY created_at",
    )
    .fetch_all(&pool)
    .await?;
    pool.close().await;
    rows.iter()
        .map(|row| {
            Ok(PaymentRow {
                database: region.name.clone(),
                id: row.try_get("id")?,
                tenant_id: row.try_get("tenant_id")?,
                account_id: row.try_get("account_id")?,
                merchant_reference: row.try_get("merchant_reference")?,
                amount_minor: row.try_get("amount_minor")?,
                currency: row.try_get("currency")?,
                status: row.try_get("status")?,
                provider_key: row.try_get("provider_key")?,
                region: row.try_get("region")?,
            })
        })
        .collect()
}

/// The provider's whole ledger.
pub async fn ledger(provider_url: &str, http: &reqwest::Client) -> anyhow::Result<Vec<Charge>> {
    Ok(http
        .get(format!("{}/charges", provider_url.trim_end_matches('/')))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// One member's applied records, their stored answers opened with `keys`
/// (without keys, or where one does not open, a record shows no answer).
pub async fn store_records(
    admin_url: &str,
    admin_token: &str,
    http: &reqwest::Client,
    keys: Option<&once_seal::KeyRing>,
) -> anyhow::Result<Vec<StoreRecord>> {
    let bytes = http
        .get(format!(
            "{}{}",
            admin_url.trim_end_matches('/'),
            once_store_client::protocol::RECORDS_PATH
        ))
        .bearer_auth(admin_token)
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    let records: Vec<once_store_client::command::Record> = once_store_client::wire::decode(&bytes)?;
    Ok(records.into_iter().map(|r| reduce(r, keys)).collect())
}

/// raft-store's name for a record status, as [`StoreRecord::status`] holds it.
fn status_name(status: once_store_client::command::Status) -> String {
    format!("{status:?}")
}

fn reduce(
    record: once_store_client::command::Record,
    keys: Option<&once_seal::KeyRing>,
) -> StoreRecord {
    let response = keys.and_then(|ring| {
        record
            .response
            .as_ref()
            .and_then(|blob| blob.open_answer(ring, &record.scope).ok())
    });
    StoreRecord {
        tenant: record.scope.tenant,
        principal: record.scope.principal,
        key: record.scope.key,
        status: status_name(record.status),
        payment_id: record.payment_id,
        business_key: record.business_key.map(|b| BusinessKey {
            tenant: b.tenant,
            account_id: b.account_id,
            merchant_reference: b.merchant_reference,
        }),
        response_status: response.as_ref().map(|r| r.status),
        response_body: response.map(|r| String::from_utf8_lossy(&r.body).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_database_url_the_node_accepts_opens_read_only() {
        assert_eq!(read_only_url("/d/eu.db"), "sqlite:///d/eu.db?mode=ro");
        assert_eq!(
            read_only_url("sqlite:///d/eu.db"),
            "sqlite:///d/eu.db?mode=ro"
        );
        assert_eq!(
            read_only_url("sqlite:d/eu.db?mode=rwc"),
            "sqlite://d/eu.db?mode=ro"
        );
        assert!(read_only_url("postgres://u@h/db").ends_with("default_transaction_read_only%3Don"));
    }

    fn status(
        id: u64,
        leader: Option<u64>,
        applied: Option<u64>,
    ) -> once_store_client::protocol::Status {
        once_store_client::protocol::Status {
            id,
            raft_addr: String::new(),
            api_addr: String::new(),
            state: String::new(),
            leader,
            term: 3,
            last_log_index: applied,
            committed_index: applied,
            applied_index: applied,
            snapshot_index: None,
            purged_index: None,
            voters: vec![1, 2, 3],
            learners: Vec::new(),
            ..Default::default()
        }
    }

    fn urls(ranked: &[(String, String)]) -> Vec<&str> {
        ranked.iter().map(|(u, _)| u.as_str()).collect()
    }

    #[test]
    fn records_are_read_from_the_leader_first_whatever_order_the_cluster_lists_members() {
        let ranked = members_by_what_they_applied(vec![
            ("http://lagging".into(), Some(status(1, Some(3), Some(10)))),
            ("http://silent".into(), None),
            ("http://ahead".into(), Some(status(2, Some(3), Some(90)))),
            ("http://leader".into(), Some(status(3, Some(3), Some(80)))),
        ]);
        assert_eq!(
            urls(&ranked),
            [
                "http://leader",
                "http://ahead",
                "http://lagging",
                "http://silent"
            ]
        );
        assert_eq!(ranked[0].1, "leader");
        assert_eq!(ranked[1].1, "not the leader, applied index 90");
    }

    #[test]
    fn of_two_members_that_say_they_lead_the_one_of_the_newer_term_comes_first() {
        let mut old = status(1, Some(1), Some(50));
        old.term = 2;
        let ranked = members_by_what_they_applied(vec![
            ("http://old-leader".into(), Some(old)),
            ("http://leader".into(), Some(status(2, Some(2), Some(40)))),
        ]);
        assert_eq!(urls(&ranked), ["http://leader", "http://old-leader"]);
    }

    #[test]
    fn without_a_leader_the_member_that_applied_the_most_comes_first() {
        let ranked = members_by_what_they_applied(vec![
            ("http://a".into(), Some(status(1, None, Some(5)))),
            ("http://b".into(), Some(status(2, None, Some(7)))),
            ("http://c".into(), Some(status(3, None, None))),
        ]);
        assert_eq!(urls(&ranked), ["http://b", "http://a", "http://c"]);
    }

    #[test]
    fn final_records_are_told_by_raft_stores_own_status_names() {
        use once_store_client::command::Status;
        for status in [
            Status::InProgress,
            Status::Completed,
            Status::FailedReplayable,
            Status::FailedRetryable,
            Status::UnknownRequiresRecovery,
            Status::Expired,
        ] {
            let record = StoreRecord {
                tenant: "acme".into(),
                principal: "demo".into(),
                key: "k".into(),
                status: status_name(status),
                payment_id: None,
                business_key: None,
                response_status: None,
                response_body: None,
            };
            assert_eq!(record.is_final(), status.is_replayable(), "{status:?}");
        }
    }
}
