//! The provider's ledger: one entry per provider idempotency key.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// What the caller asked for; compared on a repeated key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChargeBody {
    pub account_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub merchant_reference: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChargeStatus {
    Succeeded,
    Declined,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChargeRecord {
    pub id: String,
    pub idempotency_key: String,
    pub status: ChargeStatus,
    pub decline_code: Option<String>,
    #[serde(flatten)]
    pub request: ChargeBody,
    /// How many requests arrived under this key (1 = never retried).
    pub requests: u32,
}

/// The outcome of presenting a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presented {
    /// First time: this charge was just made.
    New(ChargeRecord),
    /// Seen before with the same body: the first answer again.
    Replay(ChargeRecord),
    /// Seen before with a different body.
    Conflict,
}

#[derive(Debug, Default)]
pub struct Ledger {
    // A std mutex: every operation is a map access, never awaits.
    charges: Mutex<BTreeMap<String, ChargeRecord>>,
}

impl Ledger {
    /// Charges under `key` unless the key was seen; `decline` decides a new
    /// charge's outcome.
    pub fn present(&self, key: &str, body: &ChargeBody, decline: Option<&str>) -> Presented {
        let mut charges = self.charges.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = charges.get_mut(key) {
            if existing.request != *body {
                return Presented::Conflict;
            }
            existing.requests += 1;
            return Presented::Replay(existing.clone());
        }
        let record = ChargeRecord {
            id: format!("ch_{}", uuid::Uuid::now_v7().simple()),
            idempotency_key: key.to_owned(),
            status: if decline.is_some() {
                ChargeStatus::Declined
            } else {
                ChargeStatus::Succeeded
            },
            decline_code: decline.map(str::to_owned),
            request: body.clone(),
            requests: 1,
        };
        charges.insert(key.to_owned(), record.clone());
        Presented::New(record)
    }

    pub fn get(&self, key: &str) -> Option<ChargeRecord> {
        self.charges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    pub fn all(&self) -> Vec<ChargeRecord> {
        self.charges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }
}
