//! Collects the evidence from a live cluster, read-only: every regional
//! database's `payments` rows (sqlx `Any`, SQLite or PostgreSQL), the
//! provider's ledger (`GET /charges`) and raft-store's records (`GET
//! /admin/records` on the first member that answers; postcard-encoded
//! `Vec<Record>`, decoded with raft-store's own types). A source that cannot
//! be read becomes a gap in the evidence, not a failed drill.

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
    let mut store_errors = Vec::new();
    for member in cluster.regions.iter().filter_map(|r| r.store.as_ref()) {
        match store_records(&member.api_url, http).await {
            Ok(records) => {
                evidence.store_records = Some(records);
                break;
            }
            Err(e) => store_errors.push(format!("{}: {e:#}", member.api_url)),
        }
    }
    if evidence.store_records.is_none() && !store_errors.is_empty() {
        evidence.gaps.push(format!(
            "raft-store records (no member answered): {}",
            store_errors.join("; ")
        ));
    }
    evidence
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

/// One member's applied records.
pub async fn store_records(
    api_url: &str,
    http: &reqwest::Client,
) -> anyhow::Result<Vec<StoreRecord>> {
    let bytes = http
        .get(format!(
            "{}{}",
            api_url.trim_end_matches('/'),
            once_raft_store::protocol::RECORDS_PATH
        ))
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    let records: Vec<once_raft_store::command::Record> = once_raft_store::wire::decode(&bytes)?;
    Ok(records.into_iter().map(reduce).collect())
}

fn reduce(record: once_raft_store::command::Record) -> StoreRecord {
    StoreRecord {
        tenant: record.scope.tenant,
        principal: record.scope.principal,
        key: record.scope.key,
        status: format!("{:?}", record.status),
        payment_id: record.payment_id,
        business_key: record.business_key.map(|b| BusinessKey {
            tenant: b.tenant,
            account_id: b.account_id,
            merchant_reference: b.merchant_reference,
        }),
        response_status: record.response.as_ref().map(|r| r.status),
        response_body: record
            .response
            .map(|r| String::from_utf8_lossy(&r.body).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::read_only_url;

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
}
