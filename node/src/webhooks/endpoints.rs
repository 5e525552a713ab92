//! `webhook_endpoints`: a tenant's endpoints and their signing secrets.
//!
//! A secret is `whsec_` and 64 hex digits (32 random bytes). It is shown
//! once, in the answer that made it, and stored sealed with the node's data
//! keys, bound to its tenant and endpoint (decision 0092, amending 0031):
//! the dispatcher opens it to sign. A rotation moves the current secret to
//! `previous_secret`, valid until `previous_expires_at`, in one
//! compare-and-set on the secret read, so two rotations at once cannot both
//! keep their old secret.

use once_db::Database;
use rand::RngCore;
use sqlx::Row;

use crate::data_keys::DataKeys;
use crate::domain::{TenantId, UnixMillis};

/// Event types an endpoint may name besides the wildcard: `<noun>.<verb>`,
/// lower case. Types are not closed over a list, so an event type added
/// later (`refund.succeeded`) can be subscribed to without a release here.
pub const WILDCARD: &str = "*";

/// The most endpoints a tenant may have: a bound on one event's fan-out.
/// Reaching it is `422` with the bound named; the API document's fuzzer
/// (tests/schemathesis) creates a few hundred endpoints for its one tenant
/// and must stay below it.
pub const MAX_PER_TENANT: usize = 1000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub created_at: UnixMillis,
    /// When the secret before the last rotation stops signing, if it still does.
    pub previous_expires_at: Option<UnixMillis>,
}

impl Endpoint {
    /// Whether the endpoint asked for events of `event_type`.
    pub fn wants(&self, event_type: &str) -> bool {
        self.events.iter().any(|e| e == WILDCARD || e == event_type)
    }
}

/// What the dispatcher needs to send to an endpoint.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    /// The secrets that sign, newest first.
    pub secrets: Vec<String>,
    pub deleted: bool,
}

pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("whsec_{}", hex::encode(bytes))
}

pub fn new_id() -> String {
    format!("we_{}", uuid::Uuid::now_v7().simple())
}

fn associated(tenant: &str, id: &str) -> Vec<u8> {
    format!("webhook_secret/{tenant}/{id}").into_bytes()
}

fn seal(keys: &DataKeys, tenant: &str, id: &str, secret: &str) -> Vec<u8> {
    keys.ring().seal(secret.as_bytes(), &associated(tenant, id))
}

fn open(keys: &DataKeys, tenant: &str, id: &str, blob: &[u8]) -> anyhow::Result<String> {
    let plain = keys
        .ring()
        .open(blob, &associated(tenant, id))
        .map_err(|e| anyhow::anyhow!("webhook secret of {id} does not open: {e}"))?;
    Ok(String::from_utf8(plain)?)
}

const COLUMNS: &str = "id, url, events, created_at, previous_expires_at";

fn endpoint_of(row: &sqlx::any::AnyRow, now: UnixMillis) -> anyhow::Result<Endpoint> {
    let events: String = row.try_get("events")?;
    let previous: Option<i64> = row.try_get("previous_expires_at")?;
    Ok(Endpoint {
        id: row.try_get("id")?,
        url: row.try_get("url")?,
        events: serde_json::from_str(&events)?,
        created_at: UnixMillis(row.try_get("created_at")?),
        previous_expires_at: previous.filter(|at| *at > now.0).map(UnixMillis),
    })
}

/// Adds an endpoint; returns it with its secret (shown once). `None` when
/// the tenant already has [`MAX_PER_TENANT`].
pub async fn create(
    db: &Database,
    keys: &DataKeys,
    tenant: &TenantId,
    url: &str,
    events: &[String],
    now: UnixMillis,
) -> anyhow::Result<Option<(Endpoint, String)>> {
    if list(db, tenant, now).await?.len() >= MAX_PER_TENANT {
        return Ok(None);
    }
    let (id, secret) = (new_id(), new_secret());
    sqlx::query(
        "INSERT INTO webhook_endpoints (id, tenant_id, url, events, secret, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&id)
    .bind(tenant.as_str())
    .bind(url)
    .bind(serde_json::to_string(events)?)
    .bind(seal(keys, tenant.as_str(), &id, &secret))
    .bind(now.0)
    .execute(&db.pool)
    .await?;
    let endpoint = Endpoint {
        id,
        url: url.to_owned(),
        events: events.to_vec(),
        created_at: now,
        previous_expires_at: None,
    };
    Ok(Some((endpoint, secret)))
}

/// The tenant's endpoints, oldest first.
pub async fn list(
    db: &Database,
    tenant: &TenantId,
    now: UnixMillis,
) -> anyhow::Result<Vec<Endpoint>> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM webhook_endpoints WHERE tenant_id = $1 AND deleted_at IS NULL \
         ORDER BY created_at, id"
    ))
    .bind(tenant.as_str())
    .fetch_all(&db.pool)
    .await?;
    rows.iter().map(|row| endpoint_of(row, now)).collect()
}

/// Deletes an endpoint: no event is fanned out to it after, and its pending
/// deliveries stop at their next attempt. False if the tenant has no such
/// endpoint.
pub async fn delete(
    db: &Database,
    tenant: &TenantId,
    id: &str,
    now: UnixMillis,
) -> anyhow::Result<bool> {
    let done = sqlx::query(
        "UPDATE webhook_endpoints SET deleted_at = $1 WHERE id = $2 AND tenant_id = $3 AND deleted_at IS NULL",
    )
    .bind(now.0)
    .bind(id)
    .bind(tenant.as_str())
    .execute(&db.pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Issues a new secret; the current one keeps signing for `overlap`.
/// `None` if the tenant has no such endpoint.
pub async fn rotate(
    db: &Database,
    keys: &DataKeys,
    tenant: &TenantId,
    id: &str,
    now: UnixMillis,
    overlap: std::time::Duration,
) -> anyhow::Result<Option<(Endpoint, String)>> {
    loop {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS}, secret FROM webhook_endpoints WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL"
        ))
        .bind(id)
        .bind(tenant.as_str())
        .fetch_optional(&db.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let current: Vec<u8> = row.try_get("secret")?;
        let secret = new_secret();
        let expires = now.0 + i64::try_from(overlap.as_millis()).unwrap_or(i64::MAX);
        let done = sqlx::query(
            "UPDATE webhook_endpoints SET secret = $1, previous_secret = $2, previous_expires_at = $3 \
             WHERE id = $4 AND secret = $5 AND deleted_at IS NULL",
        )
        .bind(seal(keys, tenant.as_str(), id, &secret))
        .bind(&current)
        .bind(expires)
        .bind(id)
        .bind(&current)
        .execute(&db.pool)
        .await?;
        if done.rows_affected() == 1 {
            let mut endpoint = endpoint_of(&row, now)?;
            endpoint.previous_expires_at = Some(UnixMillis(expires));
            return Ok(Some((endpoint, secret)));
        }
        // Another rotation won the compare-and-set: rotate what it left.
    }
}

/// The endpoints of `tenant` an event of `event_type` written at
/// `created_at` goes to: those that asked for its type and existed when it
/// was written.
pub async fn matching(
    conn: &mut sqlx::AnyConnection,
    tenant: &str,
    event_type: &str,
    created_at: i64,
) -> anyhow::Result<Vec<String>> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM webhook_endpoints WHERE tenant_id = $1 AND deleted_at IS NULL AND created_at <= $2"
    ))
    .bind(tenant)
    .bind(created_at)
    .fetch_all(&mut *conn)
    .await?;
    let mut ids = Vec::new();
    for row in &rows {
        let endpoint = endpoint_of(row, UnixMillis(0))?;
        if endpoint.wants(event_type) {
            ids.push(endpoint.id);
        }
    }
    Ok(ids)
}

/// Where and with what secrets to send to endpoint `id`.
pub async fn target(
    db: &Database,
    keys: &DataKeys,
    id: &str,
    now: UnixMillis,
) -> anyhow::Result<Option<Target>> {
    let row = sqlx::query(
        "SELECT tenant_id, url, secret, previous_secret, previous_expires_at, deleted_at FROM webhook_endpoints WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(&db.pool)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let tenant: String = row.try_get("tenant_id")?;
    let mut secrets = vec![open(
        keys,
        &tenant,
        id,
        &row.try_get::<Vec<u8>, _>("secret")?,
    )?];
    let previous: Option<Vec<u8>> = row.try_get("previous_secret")?;
    let expires: Option<i64> = row.try_get("previous_expires_at")?;
    if let (Some(blob), Some(expires)) = (previous, expires)
        && expires > now.0
    {
        secrets.push(open(keys, &tenant, id, &blob)?);
    }
    let deleted: Option<i64> = row.try_get("deleted_at")?;
    Ok(Some(Target {
        url: row.try_get("url")?,
        secrets,
        deleted: deleted.is_some(),
    }))
}
