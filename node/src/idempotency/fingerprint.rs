//! Request fingerprints: what makes two requests "the same" (DESIGN §4).
//!
//! The fingerprint is SHA-256 over a canonical JSON document holding the
//! operation name, the semantic headers (`Api-Version`) and the normalized
//! command. Transport metadata, `Authorization` and the key itself are not in
//! it. The version is stored next to the hash: when the canonical form has to
//! change, a new version is added and records fingerprinted under an old one
//! are compared by recomputing that old version, so retries that started
//! before a deploy still match.

use serde::Serialize;
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub version: i32,
    pub hash: String,
}

/// The version new records are fingerprinted with.
pub const CURRENT_VERSION: i32 = 1;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CanonicalV1<'a, C: Serialize> {
    operation: &'a str,
    api_version: &'a str,
    command: C,
}

/// Fingerprints a command, given in its canonical form (normalized: equal
/// meaning, equal value), under `version`. `None` when the version is
/// unknown to this build (a record written by a newer release): the caller
/// must then treat the request as not comparable.
pub fn of<C: Serialize>(
    version: i32,
    operation: &str,
    api_version: &str,
    command: C,
) -> Option<Fingerprint> {
    match version {
        1 => {
            let canonical = CanonicalV1 {
                operation,
                api_version,
                command,
            };
            // Serializing a struct of strings and integers cannot fail.
            let bytes = serde_json::to_vec(&canonical).expect("canonical command serializes");
            Some(Fingerprint {
                version,
                hash: hex::encode(Sha256::digest(&bytes)),
            })
        }
        _ => None,
    }
}
