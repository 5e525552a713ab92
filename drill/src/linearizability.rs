//! STUB (replaced by the lin branch).
use crate::client_log::ClientLog;
use serde::{Deserialize, Serialize};
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub op: u64,
    pub body_sha256: String,
    pub sent_at: u64,
    pub answered_at: Option<u64>,
    pub outcome: String,
    pub response_body: Option<String>,
}
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyViolation {
    pub tenant: String,
    pub key: String,
    pub why: String,
    pub history: Vec<HistoryEntry>,
}
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Linearizability {
    pub keys: usize,
    pub attempts: usize,
    pub indeterminate: usize,
    pub violations: Vec<KeyViolation>,
    pub undecided: Vec<(String, String)>,
}
pub fn check(_log: &ClientLog) -> Linearizability {
    unimplemented!()
}
