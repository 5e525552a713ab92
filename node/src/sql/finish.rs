//! The one finish: what finishing an operation writes in the regional
//! database, for both store modes and for operators' resolutions.
//!
//! - The record's terminal state (`sql` mode only: in the `raft` mode
//!   raft-store finished the record before the node gets here), fenced and
//!   written first, so a stale owner learns it lost before it touches the
//!   payment or the outbox.
//! - The payment's final status; a payment missing at completion is
//!   reported, never skipped. In the `raft` mode only a pending row takes
//!   it, and the event is written with it: a finish applied again (a
//!   retry, the settling pass of decision 0053) writes nothing twice.
//! - The outbox event (DESIGN §7).
//! - An operator's audit entry, when the finish is a resolution.
//!
//! All of it commits together. [`write`] is the statements; the `sql` mode's
//! request path runs it as one job of a group commit batch (decision 0037),
//! where record, payment and event are one trip to the database
//! (`hot_writes.rs`, decisions 0006 and 0039). [`finish`] runs it in a
//! transaction of its own: the `raft` mode's materialized finish and
//! operators' resolutions.

use once_store_client::command::Sealed;
use sqlx::AnyConnection;

use super::payments::Settled;
use super::records::unavailable;
use super::{hot_writes, outbox, payments, records};
use crate::domain::UnixMillis;
use crate::idempotency::record::Record;
use crate::payments::model::PaymentUpdate;
use crate::store::Resolution;
use crate::store::{Finish, StoreError};
use once_db::{Database, Dialect};

/// Where the record being finished lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordIn<'a> {
    /// `sql` mode: in this database, finished here under `owner.fence`,
    /// storing `answer` (the finish's response, sealed by the caller).
    ThisDatabase { answer: &'a Sealed },
    /// `raft` mode: raft-store finished it already.
    RaftStore,
}

/// Finishes `owner`'s operation in a transaction of its own (see the module
/// docs); `audit` is an operator's resolution to keep with it. [`StoreError::Fenced`], with
/// nothing written, when the record has a newer owner.
pub async fn finish(
    db: &Database,
    record: RecordIn<'_>,
    owner: &Record,
    finish: &Finish,
    audit: Option<&Resolution>,
) -> Result<(), StoreError> {
    let _writer = db.writer().await;
    let mut tx = db.pool.begin().await.map_err(unavailable)?;
    match write(&mut tx, db.dialect, record, owner, finish).await {
        Ok(()) => {}
        Err(StoreError::Fenced) => {
            tx.rollback().await.map_err(unavailable)?;
            return Err(StoreError::Fenced);
        }
        Err(e) => return Err(e),
    }
    if let Some(audit) = audit {
        records::insert_resolution(&mut *tx, owner, audit).await?;
    }
    tx.commit().await.map_err(unavailable)
}

/// Record (if here), payment and event, on `conn`: inside a transaction
/// whenever that is more than one statement (the `sql` mode's batches are).
pub async fn write(
    conn: &mut AnyConnection,
    dialect: Dialect,
    record: RecordIn<'_>,
    owner: &Record,
    finish: &Finish,
) -> Result<(), StoreError> {
    if let RecordIn::ThisDatabase { answer } = record {
        return hot_writes::finish(conn, dialect, "", &owner.scope, owner.fence, finish, answer)
            .await;
    }
    let settled = match &finish.payment {
        Some(update) => settle(conn, update, finish.now).await?,
        None => true,
    };
    if settled && let Some(event) = &finish.event {
        outbox::append(&mut *conn, event, finish.now).await?;
    }
    Ok(())
}

/// The payment's final state, unless a finish of the same outcome applied
/// it before (a retry whose first commit was lost to the caller, or the
/// settling pass): then no second event. Whether this one settled it.
async fn settle(
    conn: &mut AnyConnection,
    update: &PaymentUpdate,
    now: UnixMillis,
) -> Result<bool, StoreError> {
    match payments::settle(conn, update, now).await? {
        Settled::Now => Ok(true),
        Settled::Before(status) if status == update.status => Ok(false),
        Settled::Before(status) => Err(StoreError::Corrupt(format!(
            "payment {} is {status:?} in the regional database, its record says {:?}",
            update.id, update.status
        ))),
        Settled::Missing => Err(StoreError::Corrupt(format!(
            "payment {} missing at completion",
            update.id
        ))),
    }
}
