//! The regional database as the `raft` store mode uses it: a materialized
//! view of the records raft-store decides. Pending payments are upserted by
//! payment id (a region taking a record over may or may not have the row
//! already), and a finish applies the payment's final state, its outbox
//! event and any operator audit entry in one transaction. Rows a crash left
//! pending behind a finished record are found here for the settling pass
//! (decision 0053).

use super::finish::{self, RecordIn};
use super::{payments, records};
use crate::domain::{PaymentId, TenantId, UnixMillis};
use crate::idempotency::record::Record;
use crate::payments::model::{ListPosition, NewPayment, Payment};
use crate::store::{AuditEntry, Resolution};
use crate::store::{Finish, StoreError};
use once_db::Database;

/// The regional database of a raft-mode node. Every write takes the
/// database's write gate ([`Database::writer`]).
#[derive(Debug, Clone)]
pub struct Materialized {
    db: Database,
}

impl Materialized {
    pub fn new(db: Database) -> Self {
        Self { db }
    }

    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Creates the pending payment unless a row with its id exists. Its
    /// business key was reserved in raft-store, across regions; a row of
    /// another payment holding the same key here means the two stores
    /// disagree, which is reported, never papered over.
    pub async fn upsert_pending(
        &self,
        payment: &NewPayment,
        created_at: UnixMillis,
    ) -> Result<(), StoreError> {
        let _writer = self.db.writer().await;
        if payments::insert_unsettled(&self.db.pool, payment, created_at).await?
            || payments::exists(&self.db.pool, &payment.id).await?
        {
            return Ok(());
        }
        Err(StoreError::Corrupt(format!(
            "payment {} conflicts with another payment's merchant reference in the regional database",
            payment.id
        )))
    }

    /// The payment's final state and event, after raft-store finished the
    /// record. `audit` is an operator's resolution to keep with it.
    pub async fn apply_finish(
        &self,
        finish: &Finish,
        owner: &Record,
        audit: Option<&Resolution>,
    ) -> Result<(), StoreError> {
        finish::finish(&self.db, RecordIn::RaftStore, owner, finish, audit).await
    }

    /// Pending rows created before `before`, oldest first, after `after`:
    /// where the settling pass looks for rows left behind their records.
    pub async fn pending(
        &self,
        before: UnixMillis,
        after: Option<&ListPosition>,
        limit: i64,
    ) -> Result<Vec<Payment>, StoreError> {
        payments::pending(&self.db.pool, before, after, limit).await
    }

    /// An operator's audit entry on its own (a resolution that changes no payment).
    pub async fn record_resolution(
        &self,
        owner: &Record,
        audit: &Resolution,
    ) -> Result<(), StoreError> {
        let _writer = self.db.writer().await;
        records::insert_resolution(&self.db.pool, owner, audit).await
    }

    /// The audit trail kept in this region's database, newest first.
    pub async fn resolutions(&self, limit: i64) -> Result<Vec<AuditEntry>, StoreError> {
        records::recent_resolutions(&self.db.pool, limit).await
    }

    pub async fn payment(
        &self,
        tenant: &TenantId,
        id: &PaymentId,
    ) -> Result<Option<Payment>, StoreError> {
        payments::select(&self.db.pool, tenant, id).await
    }
}
