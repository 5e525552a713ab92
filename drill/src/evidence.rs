//! The evidence the checker reads, as plain data: (a) the client log, (b)
//! every regional database's `payments` rows, (c) the provider's ledger,
//! (d) raft-store's idempotency records. [`crate::gather`] fills it from a
//! live cluster; tests build it by hand with planted violations.

use serde::{Deserialize, Serialize};

use crate::client_log::ClientLog;

/// The provider key the node charges a payment under (DESIGN §7).
pub const PROVIDER_KEY_PREFIX: &str = "provider_payment_";

/// The payment a provider key belongs to.
pub fn payment_of_provider_key(key: &str) -> Option<&str> {
    key.strip_prefix(PROVIDER_KEY_PREFIX)
}

/// One row of a regional database's `payments` table
/// (`migrations/sqlite/0001_payments_and_idempotency.sql`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentRow {
    /// The region whose database held the row.
    pub database: String,
    pub id: String,
    pub tenant_id: String,
    pub account_id: String,
    pub merchant_reference: String,
    pub amount_minor: i64,
    pub currency: String,
    pub status: String,
    pub provider_key: String,
    /// The region the row says executed it.
    pub region: String,
}

/// One entry of the provider's ledger (`GET /charges`, provider-sim's
/// `ChargeRecord`): one per provider idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Charge {
    pub id: String,
    pub idempotency_key: String,
    /// `succeeded` or `declined`.
    pub status: String,
    #[serde(default)]
    pub decline_code: Option<String>,
    pub account_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub merchant_reference: String,
    #[serde(default)]
    pub requests: u32,
}

impl Charge {
    pub fn succeeded(&self) -> bool {
        self.status == "succeeded"
    }
}

/// The business key a payment holds: `(tenant, account, merchant reference)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BusinessKey {
    pub tenant: String,
    pub account_id: String,
    pub merchant_reference: String,
}

/// raft-store's idempotency record, reduced to what the checks compare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreRecord {
    pub tenant: String,
    pub principal: String,
    pub key: String,
    /// raft-store's status name, e.g. `Completed`.
    pub status: String,
    pub payment_id: Option<String>,
    pub business_key: Option<BusinessKey>,
    pub response_status: Option<u16>,
    /// The stored response body, the bytes a replay returns (lossy UTF-8).
    pub response_body: Option<String>,
}

impl StoreRecord {
    /// Finished with a stored answer that never changes inside the replay
    /// window: raft-store's `Completed` and `FailedReplayable`
    /// (`Status::is_replayable`; [`crate::gather`] writes the names).
    pub fn is_final(&self) -> bool {
        matches!(self.status.as_str(), "Completed" | "FailedReplayable")
    }
}

/// Everything the checker reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub log: ClientLog,
    pub payments: Vec<PaymentRow>,
    pub ledger: Vec<Charge>,
    /// `None` when no store member answered (or the cluster has none).
    pub store_records: Option<Vec<StoreRecord>>,
    /// Which member the records are from and why it was chosen, e.g.
    /// `http://127.0.0.1:7001 (leader)`.
    #[serde(default)]
    pub store_member: Option<String>,
    /// Sources that could not be read: a check that finds something missing
    /// may be looking at a gap, and the report says so.
    pub gaps: Vec<String>,
}

impl Evidence {
    /// "N payment rows, M ledger entries, K raft-store records": what was
    /// gathered, for the timeline and the checks' details.
    pub fn counts(&self) -> String {
        format!(
            "{} payment rows, {} ledger entries, {} raft-store records",
            self.payments.len(),
            self.ledger.len(),
            self.store_records
                .as_ref()
                .map_or_else(|| "no".to_owned(), |r| r.len().to_string())
        )
    }
}
