//! Queries on `idempotency_requests`. Every owner write is a compare-and-set
//! on `fence`; callers learn whether they still own the record from the
//! number of rows it touched.
//!
//! The stored answer is one sealed blob (`response_sealed`, with the id of
//! its key in `sealed_with`; docs/decisions/0031-encryption-at-rest.md):
//! sealed by the caller before it is written ([`Terminal::answer`]), opened
//! here when a row is read, re-sealed under a newer key in place
//! ([`reseal`]).

use std::sync::LazyLock;

use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};

use once_store_client::command::Sealed;

use crate::data_keys::DataKeys;
use crate::domain::{IdempotencyKey, PaymentId, PrincipalId, TenantId, UnixMillis};
use crate::idempotency::record::{Record, Scope, Status, Step};
use crate::store::{AuditEntry, Claim, StoreError};

const COLUMNS: &str = "tenant_id, principal_id, operation, idempotency_key, fingerprint, fingerprint_version, \
     status, step, fence, locked_until, payment_id, provider_key, response_sealed, \
     error_code, trace_id, region, takeovers, created_at, updated_at, expires_at";

const SCOPE_MATCHES: &str =
    "tenant_id = $1 AND principal_id = $2 AND operation = $3 AND idempotency_key = $4";

// The predicates of the other partial indexes, written once, verbatim as
// the migrations have them (`unfinished!` is the store's: `sql.rs`).

/// Finished, may expire: the predicate of `idempotency_requests_expiry`.
macro_rules! expirable {
    () => {
        "status IN ('COMPLETED', 'FAILED_REPLAYABLE', 'FAILED_RETRYABLE')"
    };
}
/// The predicate of `idempotency_requests_purge`.
macro_rules! expired {
    () => {
        "status = 'EXPIRED'"
    };
}

const UNFINISHED: &str = unfinished!();
const EXPIRABLE: &str = expirable!();
const EXPIRED: &str = expired!();

/// The sweeper's expiry round (`$1` now, `$2` purge after, `$3` limit).
const EXPIRE_BATCH: &str = concat!(
    "UPDATE idempotency_requests SET status = 'EXPIRED', response_sealed = NULL, \
     sealed_with = NULL, purge_after = $2, updated_at = $1 \
     WHERE (tenant_id, principal_id, operation, idempotency_key) IN ( \
         SELECT tenant_id, principal_id, operation, idempotency_key FROM idempotency_requests \
         WHERE ",
    expirable!(),
    " AND expires_at <= $1 LIMIT $3) AND ",
    expirable!(),
    " AND expires_at <= $1"
);

/// The sweeper's purge round (`$1` now, `$2` limit).
const PURGE_BATCH: &str = concat!(
    "DELETE FROM idempotency_requests \
     WHERE (tenant_id, principal_id, operation, idempotency_key) IN ( \
         SELECT tenant_id, principal_id, operation, idempotency_key FROM idempotency_requests \
         WHERE ",
    expired!(),
    " AND purge_after <= $1 LIMIT $2) AND ",
    expired!(),
    " AND purge_after <= $1"
);

/// Every metrics scrape: the oldest unfinished record's age …
const OLDEST_UNFINISHED: &str = concat!(
    "SELECT MIN(created_at) AS oldest FROM idempotency_requests WHERE ",
    unfinished!()
);
/// … and how many wait for an operator (the index's predicate first, so the
/// count reads the unfinished records only).
const COUNT_UNKNOWN: &str = concat!(
    "SELECT COUNT(*) AS n FROM idempotency_requests WHERE ",
    unfinished!(),
    " AND status = 'UNKNOWN_REQUIRES_RECOVERY'"
);

/// The recovery worker's round (`$1` now, `$2` limit).
fn select_due_for_recovery() -> String {
    format!(
        "SELECT {COLUMNS} FROM idempotency_requests \
         WHERE {UNFINISHED} AND locked_until <= $1 ORDER BY locked_until LIMIT $2"
    )
}

/// The queries the node's loops send every round (the recovery worker, the
/// sweeper, each metrics scrape), each with the index that must serve it;
/// `tests/api/query_plans.rs` checks them.
pub fn round_queries() -> Vec<once_db::RoundQuery> {
    use once_db::RoundQuery;
    vec![
        RoundQuery::new(
            "recovery round",
            select_due_for_recovery(),
            "idempotency_requests_unfinished",
        ),
        RoundQuery::new("expiry round", EXPIRE_BATCH, "idempotency_requests_expiry"),
        RoundQuery::new("purge round", PURGE_BATCH, "idempotency_requests_purge"),
        RoundQuery::new(
            "metrics: oldest unfinished",
            OLDEST_UNFINISHED,
            "idempotency_requests_unfinished",
        ),
        RoundQuery::new(
            "metrics: unknown outcomes",
            COUNT_UNKNOWN,
            "idempotency_requests_unfinished",
        ),
    ]
}

type AnyQuery<'q> = sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>;

fn bind_scope<'q>(query: AnyQuery<'q>, scope: &'q Scope) -> AnyQuery<'q> {
    query
        .bind(scope.tenant.as_str())
        .bind(scope.principal.as_str())
        .bind(scope.operation)
        .bind(scope.key.as_str())
}

/// An owner write: a compare-and-set on the record's fence,
/// `UPDATE … SET {set} WHERE <scope> AND fence = $5 [AND {guard}]`.
/// `$1`–`$4` are the scope and `$5` the fence; `set` and `guard` number
/// their own values from `$6`, bound in that order by the caller.
struct FencedUpdate {
    sql: String,
}

impl FencedUpdate {
    fn new(set: &str, guard: Option<&str>) -> Self {
        // `on_the_keyed_row!`, spelled at run time.
        let guard = guard
            .map(|g| format!(" AND ({g}) IS TRUE"))
            .unwrap_or_default();
        Self {
            sql: format!(
                "UPDATE idempotency_requests SET {set} WHERE {SCOPE_MATCHES} AND fence = $5{guard}"
            ),
        }
    }

    /// [`StoreError::Fenced`] when no row matched: the caller no longer
    /// holds `fence`, or the record is not in a state the write applies to.
    async fn run<'q, 'e>(
        &'q self,
        db: impl Executor<'e, Database = Any>,
        scope: &'q Scope,
        fence: i64,
        bind: impl FnOnce(AnyQuery<'q>) -> AnyQuery<'q>,
    ) -> Result<(), StoreError> {
        let query = bind_scope(sqlx::query(&self.sql), scope).bind(fence);
        let done = bind(query).execute(db).await.map_err(unavailable)?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(StoreError::Fenced)
        }
    }
}

/// [`take_over`]'s write.
static TAKE_OVER: LazyLock<FencedUpdate> = LazyLock::new(|| {
    FencedUpdate::new(
        "fence = fence + 1, status = 'IN_PROGRESS', locked_until = $6, updated_at = $7, \
         trace_id = COALESCE($8, trace_id), takeovers = takeovers + 1",
        Some(
            "((status = 'IN_PROGRESS' AND locked_until <= $7) OR status = 'UNKNOWN_REQUIRES_RECOVERY')",
        ),
    )
});

/// [`restart`]'s write.
static RESTART: LazyLock<FencedUpdate> = LazyLock::new(|| {
    FencedUpdate::new(
        "fence = fence + 1, status = 'IN_PROGRESS', step = 'LOCAL_PAYMENT_CREATED', \
         locked_until = $6, updated_at = $7, trace_id = COALESCE($8, trace_id), error_code = NULL, expires_at = NULL, \
         payment_id = COALESCE(payment_id, $9), provider_key = COALESCE(provider_key, $10)",
        Some("status = 'FAILED_RETRYABLE'"),
    )
});

/// [`renew`]'s write.
static RENEW: LazyLock<FencedUpdate> = LazyLock::new(|| {
    FencedUpdate::new(
        "fence = fence + 1, status = 'IN_PROGRESS', step = 'LOCAL_PAYMENT_CREATED', \
         fingerprint = $9, fingerprint_version = $10, payment_id = $11, provider_key = $12, \
         response_sealed = NULL, sealed_with = NULL, \
         error_code = NULL, expires_at = NULL, purge_after = NULL, locked_until = $6, updated_at = $7, \
         trace_id = $8, created_at = $7, region = $13",
        Some(
            "(status = 'EXPIRED' OR (status IN ('COMPLETED', 'FAILED_REPLAYABLE', 'FAILED_RETRYABLE') AND expires_at <= $7))",
        ),
    )
});

/// [`set_payment`]'s write.
static SET_PAYMENT: LazyLock<FencedUpdate> =
    LazyLock::new(|| FencedUpdate::new("step = $6, payment_id = $7, provider_key = $8", None));

/// [`forget_payment`]'s write.
static FORGET_PAYMENT: LazyLock<FencedUpdate> =
    LazyLock::new(|| FencedUpdate::new("step = $6, payment_id = NULL, provider_key = NULL", None));

/// [`set_step`]'s write.
static SET_STEP: LazyLock<FencedUpdate> =
    LazyLock::new(|| FencedUpdate::new("step = $6, updated_at = $7", Some(UNFINISHED)));

/// [`mark_unknown`]'s write.
static MARK_UNKNOWN: LazyLock<FencedUpdate> = LazyLock::new(|| {
    FencedUpdate::new(
        "status = 'UNKNOWN_REQUIRES_RECOVERY', locked_until = $6, updated_at = $7",
        Some(UNFINISHED),
    )
});

/// [`finish`]'s write.
static FINISH: LazyLock<FencedUpdate> = LazyLock::new(|| {
    FencedUpdate::new(
        "status = $6, step = $7, response_sealed = $8, sealed_with = $9, \
         error_code = $10, updated_at = $11, expires_at = $12, locked_until = $11",
        Some(UNFINISHED),
    )
});

/// The fenced writes, each finding its record by key
/// ([`crate::sql::keyed_writes`]).
pub fn keyed_writes() -> Vec<once_db::RoundQuery> {
    [
        ("take over", &TAKE_OVER),
        ("restart", &RESTART),
        ("renew", &RENEW),
        ("set payment", &SET_PAYMENT),
        ("forget payment", &FORGET_PAYMENT),
        ("set step", &SET_STEP),
        ("mark unknown", &MARK_UNKNOWN),
        ("finish", &FINISH),
    ]
    .into_iter()
    .map(|(name, update)| {
        once_db::RoundQuery::new(name, update.sql.as_str(), "idempotency_requests_pkey")
    })
    .collect()
}

pub(super) fn unavailable(e: sqlx::Error) -> StoreError {
    StoreError::Unavailable(e.into())
}

/// The step a new record is claimed at, with its pending payment in the
/// same transaction: "the provider may be called". Nothing happens between
/// creating the payment and calling the provider that a crash could leave
/// half done, so the `LOCAL_PAYMENT_CREATED` recovery point would be a
/// durable write that recovery never needs; a crash after the claim makes
/// recovery ask the provider by key before charging, as after any
/// `PROVIDER_REQUEST_SENT` (the raft mode claims the same way).
pub const CLAIMED_AT: Step = Step::ProviderRequestSent;

pub async fn select<'e>(
    db: impl Executor<'e, Database = Any>,
    scope: &Scope,
    keys: &DataKeys,
) -> Result<Option<Record>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM idempotency_requests WHERE {SCOPE_MATCHES}");
    let row = bind_scope(sqlx::query(&sql), scope)
        .fetch_optional(db)
        .await
        .map_err(unavailable)?;
    row.map(|r| decode(&r, scope.operation, keys)).transpose()
}

/// An expired lease (or an unknown outcome): bump the fence and renew the
/// lease, keeping the step and the payment. Only one of several racing
/// callers matches `seen.fence`. `trace_id` replaces the executing trace
/// when the caller has one (a client retry), and is kept otherwise
/// (recovery worker, operators).
pub async fn take_over<'e>(
    db: impl Executor<'e, Database = Any>,
    seen: &Record,
    now: UnixMillis,
    lease: std::time::Duration,
    trace_id: Option<&str>,
) -> Result<(), StoreError> {
    TAKE_OVER
        .run(db, &seen.scope, seen.fence, |q| {
            q.bind(now.plus(lease).0).bind(now.0).bind(trace_id)
        })
        .await
}

/// `FAILED_RETRYABLE` runs again under the same record: back to
/// `IN_PROGRESS`, keeping its payment if it had one, else taking `payment`.
pub async fn restart<'e>(
    db: impl Executor<'e, Database = Any>,
    seen: &Record,
    claim: &Claim,
    payment: &PaymentId,
) -> Result<(), StoreError> {
    RESTART
        .run(db, &seen.scope, seen.fence, |q| {
            q.bind(claim.now.plus(claim.lease).0)
                .bind(claim.now.0)
                .bind(claim.trace_id.as_deref())
                .bind(payment.as_str())
                .bind(payment.provider_key())
        })
        .await
}

/// Past the replay window: the key starts a new operation with a new
/// fingerprint and a new payment. The old answer is gone for good.
pub async fn renew<'e>(
    db: impl Executor<'e, Database = Any>,
    seen: &Record,
    claim: &Claim,
    payment: &PaymentId,
) -> Result<(), StoreError> {
    RENEW
        .run(db, &seen.scope, seen.fence, |q| {
            q.bind(claim.now.plus(claim.lease).0)
                .bind(claim.now.0)
                .bind(claim.trace_id.as_deref())
                .bind(&claim.fingerprint.hash)
                .bind(i64::from(claim.fingerprint.version))
                .bind(payment.as_str())
                .bind(payment.provider_key())
                .bind(&claim.region)
        })
        .await
}

/// The payment was created under this record: remember it.
pub async fn set_payment<'e>(
    db: impl Executor<'e, Database = Any>,
    scope: &Scope,
    fence: i64,
    payment: &PaymentId,
) -> Result<(), StoreError> {
    SET_PAYMENT
        .run(db, scope, fence, |q| {
            q.bind(Step::LocalPaymentCreated.as_str())
                .bind(payment.as_str())
                .bind(payment.provider_key())
        })
        .await
}

/// The claim found its business key taken: the record keeps no payment.
pub async fn forget_payment<'e>(
    db: impl Executor<'e, Database = Any>,
    scope: &Scope,
    fence: i64,
) -> Result<(), StoreError> {
    FORGET_PAYMENT
        .run(db, scope, fence, |q| q.bind(Step::Received.as_str()))
        .await
}

pub async fn set_step<'e>(
    db: impl Executor<'e, Database = Any>,
    scope: &Scope,
    fence: i64,
    step: Step,
    now: UnixMillis,
) -> Result<(), StoreError> {
    SET_STEP
        .run(db, scope, fence, |q| q.bind(step.as_str()).bind(now.0))
        .await
}

pub async fn mark_unknown<'e>(
    db: impl Executor<'e, Database = Any>,
    scope: &Scope,
    fence: i64,
    now: UnixMillis,
    retry_at: UnixMillis,
) -> Result<(), StoreError> {
    MARK_UNKNOWN
        .run(db, scope, fence, |q| q.bind(retry_at.0).bind(now.0))
        .await
}

/// A terminal state of a record, as [`finish`] writes it.
#[derive(Debug, Clone, Copy)]
pub struct Terminal<'a> {
    pub status: Status,
    pub step: Step,
    /// The stored answer, sealed (replayable states only).
    pub answer: Option<&'a Sealed>,
    pub error_code: Option<&'a str>,
    pub now: UnixMillis,
    pub expires_at: UnixMillis,
}

/// Writes a terminal status (and, for replayable ones, the stored answer).
pub async fn finish<'e>(
    db: impl Executor<'e, Database = Any>,
    scope: &Scope,
    fence: i64,
    terminal: &Terminal<'_>,
) -> Result<(), StoreError> {
    let answer = terminal.answer;
    FINISH
        .run(db, scope, fence, |q| {
            q.bind(terminal.status.as_str())
                .bind(terminal.step.as_str())
                .bind(answer.map(|a| a.0.clone()))
                .bind(answer.and_then(|a| a.key_id().map(str::to_owned)))
                .bind(terminal.error_code)
                .bind(terminal.now.0)
                .bind(terminal.expires_at.0)
        })
        .await
}

/// Purges stored answers past their window, a batch at a time (the sql
/// mode keeps no command payload in the record: the payment's facts are
/// its row in `payments`). The
/// statement names rows by primary key so each batch is a short write.
pub async fn expire_batch<'e>(
    db: impl Executor<'e, Database = Any>,
    now: UnixMillis,
    purge_after: UnixMillis,
    limit: i64,
) -> Result<u64, StoreError> {
    let done = sqlx::query(EXPIRE_BATCH)
        .bind(now.0)
        .bind(purge_after.0)
        .bind(limit)
        .execute(db)
        .await
        .map_err(unavailable)?;
    Ok(done.rows_affected())
}

pub async fn purge_batch<'e>(
    db: impl Executor<'e, Database = Any>,
    now: UnixMillis,
    limit: i64,
) -> Result<u64, StoreError> {
    let done = sqlx::query(PURGE_BATCH)
        .bind(now.0)
        .bind(limit)
        .execute(db)
        .await
        .map_err(unavailable)?;
    Ok(done.rows_affected())
}

/// Unfinished records whose lease or backoff ran out, oldest first; served
/// by the partial index on `locked_until`.
pub async fn due_for_recovery<'e>(
    db: impl Executor<'e, Database = Any>,
    now: UnixMillis,
    limit: i64,
    keys: &DataKeys,
) -> Result<Vec<Record>, StoreError> {
    let rows = sqlx::query(&select_due_for_recovery())
        .bind(now.0)
        .bind(limit)
        .fetch_all(db)
        .await
        .map_err(unavailable)?;
    rows.iter().map(|row| decode_any(row, keys)).collect()
}

pub async fn with_status<'e>(
    db: impl Executor<'e, Database = Any>,
    status: Status,
    limit: i64,
    keys: &DataKeys,
) -> Result<Vec<Record>, StoreError> {
    // The status spelled out after the predicate of the partial index that
    // holds it, so an operator's listing reads those rows, not the table.
    let index_predicate = if status.is_unfinished() {
        UNFINISHED
    } else if status.can_expire() {
        EXPIRABLE
    } else {
        EXPIRED
    };
    let sql = format!(
        "SELECT {COLUMNS} FROM idempotency_requests WHERE {index_predicate} AND status = '{status}' \
         ORDER BY created_at LIMIT $1"
    );
    let rows = sqlx::query(&sql)
        .bind(limit)
        .fetch_all(db)
        .await
        .map_err(unavailable)?;
    rows.iter().map(|row| decode_any(row, keys)).collect()
}

pub async fn by_tenant_and_key<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant: &str,
    key: &str,
    keys: &DataKeys,
) -> Result<Vec<Record>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM idempotency_requests WHERE tenant_id = $1 AND idempotency_key = $2 ORDER BY principal_id"
    );
    let rows = sqlx::query(&sql)
        .bind(tenant)
        .bind(key)
        .fetch_all(db)
        .await
        .map_err(unavailable)?;
    rows.iter().map(|row| decode_any(row, keys)).collect()
}

/// How many records wait for an operator (`UNKNOWN_REQUIRES_RECOVERY`).
pub async fn count_unknown<'e>(db: impl Executor<'e, Database = Any>) -> Result<i64, StoreError> {
    let row = sqlx::query(COUNT_UNKNOWN)
        .fetch_one(db)
        .await
        .map_err(unavailable)?;
    row.try_get("n").map_err(unavailable)
}

pub async fn insert_resolution<'e>(
    db: impl Executor<'e, Database = Any>,
    record: &Record,
    resolution: &crate::store::Resolution,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO record_resolutions (id, tenant_id, principal_id, operation, idempotency_key, payment_id, \
         outcome, reason, actor, resolved_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(format!("res_{}", uuid::Uuid::now_v7().simple()))
    .bind(record.scope.tenant.as_str())
    .bind(record.scope.principal.as_str())
    .bind(record.scope.operation)
    .bind(record.scope.key.as_str())
    .bind(record.payment_id.as_ref().map(PaymentId::as_str))
    .bind(resolution.outcome.as_str())
    .bind(&resolution.reason)
    .bind(&resolution.actor)
    .bind(resolution.at.0)
    .execute(db)
    .await
    .map_err(unavailable)?;
    Ok(())
}

/// The newest `limit` audit entries.
pub async fn recent_resolutions<'e>(
    db: impl Executor<'e, Database = Any>,
    limit: i64,
) -> Result<Vec<AuditEntry>, StoreError> {
    let rows = sqlx::query(
        "SELECT tenant_id, principal_id, idempotency_key, payment_id, outcome, reason, actor, resolved_at \
         FROM record_resolutions ORDER BY resolved_at DESC, id DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(db)
    .await
    .map_err(unavailable)?;
    rows.iter()
        .map(|row| {
            Ok(AuditEntry {
                tenant: row.try_get("tenant_id")?,
                principal: row.try_get("principal_id")?,
                key: row.try_get("idempotency_key")?,
                payment_id: row.try_get("payment_id")?,
                outcome: row.try_get("outcome")?,
                reason: row.try_get("reason")?,
                actor: row.try_get("actor")?,
                resolved_at: row.try_get("resolved_at")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(unavailable)
}

pub async fn oldest_unfinished<'e>(
    db: impl Executor<'e, Database = Any>,
) -> Result<Option<UnixMillis>, StoreError> {
    let row = sqlx::query(OLDEST_UNFINISHED)
        .fetch_one(db)
        .await
        .map_err(unavailable)?;
    let oldest: Option<i64> = row.try_get("oldest").map_err(unavailable)?;
    Ok(oldest.map(UnixMillis))
}

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

/// Decodes a row whose operation is read from the row itself.
fn decode_any(row: &AnyRow, keys: &DataKeys) -> Result<Record, StoreError> {
    let operation: String = row.try_get("operation").map_err(unavailable)?;
    let operation = crate::idempotency::record::known_operation(&operation)
        .ok_or_else(|| corrupt(format!("operation {operation}")))?;
    decode(row, operation, keys)
}

fn decode(row: &AnyRow, operation: &'static str, keys: &DataKeys) -> Result<Record, StoreError> {
    let get_str = |c: &str| row.try_get::<String, _>(c).map_err(unavailable);
    let get_opt_str = |c: &str| row.try_get::<Option<String>, _>(c).map_err(unavailable);
    let get_i64 = |c: &str| row.try_get::<i64, _>(c).map_err(unavailable);
    let get_opt_i64 = |c: &str| row.try_get::<Option<i64>, _>(c).map_err(unavailable);

    let scope = Scope {
        tenant: TenantId::parse(&get_str("tenant_id")?).ok_or_else(|| corrupt("tenant_id"))?,
        principal: PrincipalId::parse(&get_str("principal_id")?)
            .ok_or_else(|| corrupt("principal_id"))?,
        operation,
        key: IdempotencyKey::parse(get_str("idempotency_key")?.as_bytes()).map_err(corrupt)?,
    };
    let status: Status = get_str("status")?.parse().map_err(corrupt)?;
    let sealed = row
        .try_get::<Option<Vec<u8>>, _>("response_sealed")
        .map_err(unavailable)?;
    let response = match sealed {
        // An expired record keeps its metadata, never its answer.
        Some(blob) if status != Status::Expired => {
            Some(keys.open_answer(&Scope::to_store(&scope), &Sealed(blob))?)
        }
        _ => None,
    };
    Ok(Record {
        scope,
        fingerprint: get_str("fingerprint")?,
        fingerprint_version: i32::try_from(get_i64("fingerprint_version")?).map_err(corrupt)?,
        status,
        step: get_str("step")?.parse().map_err(corrupt)?,
        fence: get_i64("fence")?,
        locked_until: UnixMillis(get_i64("locked_until")?),
        payment_id: get_opt_str("payment_id")?.map(PaymentId::from_trusted),
        provider_key: get_opt_str("provider_key")?,
        response,
        error_code: get_opt_str("error_code")?,
        trace_id: get_opt_str("trace_id")?,
        region: get_str("region")?,
        takeovers: i32::try_from(get_i64("takeovers")?).map_err(corrupt)?,
        created_at: UnixMillis(get_i64("created_at")?),
        updated_at: UnixMillis(get_i64("updated_at")?),
        expires_at: get_opt_i64("expires_at")?.map(UnixMillis),
    })
}

/// A row whose answer is sealed under a key other than the newest.
#[derive(Debug)]
pub struct StaleAnswer {
    pub scope: Scope,
    pub answer: Sealed,
}

/// Up to `limit` rows whose answer is sealed under a key other than
/// `newest` (served by the partial index on `sealed_with`).
pub async fn stale_answers<'e>(
    db: impl Executor<'e, Database = Any>,
    newest: &str,
    limit: i64,
) -> Result<Vec<StaleAnswer>, StoreError> {
    let rows = sqlx::query(
        "SELECT tenant_id, principal_id, operation, idempotency_key, response_sealed \
         FROM idempotency_requests \
         WHERE sealed_with IS NOT NULL AND sealed_with <> $1 AND response_sealed IS NOT NULL LIMIT $2",
    )
    .bind(newest)
    .bind(limit)
    .fetch_all(db)
    .await
    .map_err(unavailable)?;
    rows.iter()
        .map(|row| {
            let get_str = |c: &str| row.try_get::<String, _>(c).map_err(unavailable);
            let operation = get_str("operation")?;
            Ok(StaleAnswer {
                scope: Scope {
                    tenant: TenantId::parse(&get_str("tenant_id")?)
                        .ok_or_else(|| corrupt("tenant_id"))?,
                    principal: PrincipalId::parse(&get_str("principal_id")?)
                        .ok_or_else(|| corrupt("principal_id"))?,
                    operation: crate::idempotency::record::known_operation(&operation)
                        .ok_or_else(|| corrupt(format!("operation {operation}")))?,
                    key: IdempotencyKey::parse(get_str("idempotency_key")?.as_bytes())
                        .map_err(corrupt)?,
                },
                answer: Sealed(
                    row.try_get::<Vec<u8>, _>("response_sealed")
                        .map_err(unavailable)?,
                ),
            })
        })
        .collect()
}

/// Replaces a row's sealed answer with `resealed` if it still holds `seen`:
/// a compare-and-set on the blob, so an owner's write in between (a new
/// answer, an expiry) always wins. Whether it applied.
pub async fn reseal<'e>(
    db: impl Executor<'e, Database = Any>,
    scope: &Scope,
    seen: &Sealed,
    resealed: &Sealed,
) -> Result<bool, StoreError> {
    let sql = format!(
        "UPDATE idempotency_requests SET response_sealed = $5, sealed_with = $6 \
         WHERE {SCOPE_MATCHES} AND response_sealed = $7"
    );
    let done = bind_scope(sqlx::query(&sql), scope)
        .bind(resealed.0.clone())
        .bind(resealed.key_id().map(str::to_owned))
        .bind(seen.0.clone())
        .execute(db)
        .await
        .map_err(unavailable)?;
    Ok(done.rows_affected() == 1)
}

/// How many stored answers each key id seals.
pub async fn answers_by_key<'e>(
    db: impl Executor<'e, Database = Any>,
) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = sqlx::query(
        "SELECT sealed_with, COUNT(*) AS n FROM idempotency_requests \
         WHERE sealed_with IS NOT NULL GROUP BY sealed_with ORDER BY sealed_with",
    )
    .fetch_all(db)
    .await
    .map_err(unavailable)?;
    rows.iter()
        .map(|row| Ok((row.try_get("sealed_with")?, row.try_get("n")?)))
        .collect::<Result<_, sqlx::Error>>()
        .map_err(unavailable)
}
