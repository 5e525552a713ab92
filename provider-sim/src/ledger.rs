//! The provider's ledger: one entry per provider idempotency key.
//!
//! A real provider never forgets a charge, so the ledger can keep a
//! journal: with [`Ledger::open`], every charge (and every later request
//! under its key) is appended to a JSON-lines file before the answer goes
//! out, and a restarted simulator reads it back — `once up` resumes with
//! the charges its provider made, and a recovery after the restart finds
//! them by key instead of charging again. Appends are written, not
//! fsynced: they survive the process being killed, not the machine losing
//! power, which is all a simulator on one machine needs.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
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
    // A std mutex: every operation is a map access (and with a journal one
    // small append), never awaits.
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    charges: BTreeMap<String, ChargeRecord>,
    journal: Option<File>,
}

/// A journal that could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("ledger journal {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("ledger journal {path}, line {line}: {source}")]
    Corrupt {
        path: String,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
}

impl Ledger {
    /// A ledger journaled to `path` (created if missing); what the file
    /// holds is loaded first, the last line of each key winning.
    pub fn open(path: &Path) -> Result<Self, JournalError> {
        let shown = path.display().to_string();
        let io = |source| JournalError::Io {
            path: shown.clone(),
            source,
        };
        let mut charges = BTreeMap::new();
        if path.exists() {
            let file = File::open(path).map_err(io)?;
            for (n, line) in BufReader::new(file).lines().enumerate() {
                let line = line.map_err(io)?;
                if line.trim().is_empty() {
                    continue;
                }
                let record: ChargeRecord =
                    serde_json::from_str(&line).map_err(|source| JournalError::Corrupt {
                        path: shown.clone(),
                        line: n + 1,
                        source,
                    })?;
                charges.insert(record.idempotency_key.clone(), record);
            }
        }
        let journal = File::options()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        Ok(Self {
            state: Mutex::new(State {
                charges,
                journal: Some(journal),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Charges under `key` unless the key was seen; `decline` decides a new
    /// charge's outcome.
    ///
    /// With a journal, the charge is appended before this returns, so no
    /// answer is ever sent for a charge a restart would forget; a failed
    /// append panics the request (an answered charge must not be lost).
    pub fn present(&self, key: &str, body: &ChargeBody, decline: Option<&str>) -> Presented {
        let mut state = self.lock();
        let State { charges, journal } = &mut *state;
        if let Some(existing) = charges.get_mut(key) {
            if existing.request != *body {
                return Presented::Conflict;
            }
            existing.requests += 1;
            journal_append(journal, existing);
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
        journal_append(journal, &record);
        charges.insert(key.to_owned(), record.clone());
        Presented::New(record)
    }

    pub fn get(&self, key: &str) -> Option<ChargeRecord> {
        self.lock().charges.get(key).cloned()
    }

    pub fn all(&self) -> Vec<ChargeRecord> {
        self.lock().charges.values().cloned().collect()
    }
}

fn journal_append(journal: &mut Option<File>, record: &ChargeRecord) {
    let Some(file) = journal else { return };
    let mut line = serde_json::to_vec(record).expect("a charge record serializes");
    line.push(b'\n');
    file.write_all(&line)
        .expect("appending to the ledger journal (an answered charge must not be forgotten)");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(amount_minor: i64) -> ChargeBody {
        ChargeBody {
            account_id: "acc_1".into(),
            amount_minor,
            currency: "EUR".into(),
            merchant_reference: "order-1".into(),
        }
    }

    #[test]
    fn a_journaled_ledger_remembers_its_charges_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let first = match Ledger::open(&path)
            .unwrap()
            .present("k1", &body(1000), None)
        {
            Presented::New(record) => record,
            other => panic!("{other:?}"),
        };
        {
            let ledger = Ledger::open(&path).unwrap();
            ledger.present("k2", &body(500), Some("insufficient_funds"));
            // A retry after the restart is answered from the ledger.
            let again = ledger.present("k1", &body(1000), None);
            assert!(matches!(&again, Presented::Replay(r) if r.id == first.id && r.requests == 2));
            assert!(matches!(
                ledger.present("k1", &body(999), None),
                Presented::Conflict
            ));
        }
        let reopened = Ledger::open(&path).unwrap();
        let all = reopened.all();
        assert_eq!(all.len(), 2, "one charge per key: {all:?}");
        let k1 = reopened.get("k1").unwrap();
        assert_eq!((k1.id.as_str(), k1.requests), (first.id.as_str(), 2));
        assert_eq!(reopened.get("k2").unwrap().status, ChargeStatus::Declined);
    }

    #[test]
    fn a_corrupt_journal_is_refused_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        std::fs::write(&path, "{not json}\n").unwrap();
        let err = Ledger::open(&path).unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
    }
}
