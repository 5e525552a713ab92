//! The idempotency record (DESIGN §4): who owns a key, what the first command
//! meant, how far its execution got, and what to replay.
//!
//! One record model (docs/decisions/0027-one-record-model.md): [`Status`],
//! [`Step`] and [`StoredResponse`] are raft-store's own types, defined once in
//! `once_store_client::command` and re-exported here. [`Record`] and [`Scope`]
//! are the node's typed view of a record, kept because they differ: validated
//! domain types where raft-store keeps strings, a signed fence (the SQL
//! column), and none of raft-store's business key, payload or purge time. A
//! raft-store record is parsed into them in `crate::raft::convert`, an SQL
//! row in `crate::sql::records`.

use once_store_client::command as store;
pub use once_store_client::command::{Status, Step, StoredResponse};

use crate::domain::{IdempotencyKey, PaymentId, PrincipalId, TenantId, UnixMillis};

/// The scope a key is unique in. The tenant and principal come from the
/// credential: two callers can never see each other's records, even when
/// they pick the same key (I7). See docs/ARCHITECTURE.md for why the
/// principal is part of the scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    pub tenant: TenantId,
    pub principal: PrincipalId,
    pub operation: &'static str,
    pub key: IdempotencyKey,
}

impl Scope {
    /// The scope as the store's records carry it (and as sealed blobs are
    /// bound to it, in every store mode).
    pub fn to_store(&self) -> store::Scope {
        store::Scope {
            tenant: self.tenant.as_str().to_owned(),
            principal: self.principal.as_str().to_owned(),
            operation: self.operation.to_owned(),
            key: self.key.as_str().to_owned(),
        }
    }
}

/// The operation of `POST /payments`.
pub const CREATE_PAYMENT: &str = "payments.create";

/// The operations this build claims keys for.
const OPERATIONS: [&str; 1] = [CREATE_PAYMENT];

/// The operations this build knows, so names read back from storage become
/// the same `&'static str` the code claims with.
pub fn known_operation(name: &str) -> Option<&'static str> {
    OPERATIONS.into_iter().find(|op| *op == name)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub scope: Scope,
    pub fingerprint_version: i32,
    pub fingerprint: String,
    pub status: Status,
    pub step: Step,
    /// Bumped by every takeover; every owner write must present it (I6).
    pub fence: i64,
    pub locked_until: UnixMillis,
    pub payment_id: Option<PaymentId>,
    pub provider_key: Option<String>,
    /// Present when `status.is_replayable()`, until the record expires.
    pub response: Option<StoredResponse>,
    pub error_code: Option<String>,
    pub trace_id: Option<String>,
    pub region: String,
    pub takeovers: i32,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
    pub expires_at: Option<UnixMillis>,
}

impl Record {
    /// Past its replay window, whether or not the sweeper got to it yet
    /// (one rule with raft-store: [`store::is_expired`]).
    pub fn is_expired(&self, now: UnixMillis) -> bool {
        store::is_expired(self.status, self.expires_at.map(|at| at.0), now.0)
    }

    /// The owner's lease has run out (one rule with raft-store:
    /// [`store::lease_expired`]).
    pub fn lease_expired(&self, now: UnixMillis) -> bool {
        store::lease_expired(self.locked_until.0, now.0)
    }
}
