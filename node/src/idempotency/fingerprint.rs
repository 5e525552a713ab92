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

use crate::payments::command::CreatePayment;

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

/// Fingerprints a create-payment command under `version`. `None` when the
/// version is unknown to this build (a record written by a newer release):
/// the caller must then treat the request as not comparable.
pub fn of_create_payment(
    version: i32,
    operation: &str,
    api_version: &str,
    command: &CreatePayment,
) -> Option<Fingerprint> {
    match version {
        1 => {
            let canonical = CanonicalV1 {
                operation,
                api_version,
                command: command.canonical(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(body: &str) -> String {
        let cmd = CreatePayment::parse(body.as_bytes()).unwrap();
        of_create_payment(1, "payments.create", "2026-11-01", &cmd)
            .unwrap()
            .hash
    }

    #[test]
    fn equal_commands_have_equal_fingerprints() {
        let base =
            fp(r#"{"accountId":"a","amount":"10.00","currency":"EUR","merchantReference":"r"}"#);
        assert_eq!(
            base,
            fp(r#"{"merchantReference":"r","currency":"eur","amount":"10.0","accountId":"a"}"#)
        );
        assert_eq!(
            base,
            fp(
                r#"{"accountId":"a","amount":"10","currency":"EUR","merchantReference":"r","channel":"web"}"#
            )
        );
        assert_ne!(
            base,
            fp(r#"{"accountId":"a","amount":"10.01","currency":"EUR","merchantReference":"r"}"#)
        );
        assert_ne!(
            base,
            fp(
                r#"{"accountId":"a","amount":"10.00","currency":"EUR","merchantReference":"r","channel":"pos"}"#
            )
        );
    }

    #[test]
    fn the_semantic_header_is_part_of_the_fingerprint() {
        let cmd = CreatePayment::parse(
            br#"{"accountId":"a","amount":"1","currency":"EUR","merchantReference":"r"}"#,
        )
        .unwrap();
        let a = of_create_payment(1, "payments.create", "2026-11-01", &cmd).unwrap();
        let b = of_create_payment(1, "payments.create", "2027-01-01", &cmd).unwrap();
        assert_ne!(a, b);
        assert!(of_create_payment(99, "payments.create", "2026-11-01", &cmd).is_none());
    }
}
