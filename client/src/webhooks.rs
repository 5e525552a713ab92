//! Verifying the webhooks `once` sends (docs/api.md, decision 0092).
//!
//! Each delivery carries `Once-Signature: t=<unix seconds>,v1=<hex>` —
//! HMAC-SHA256 keyed by the endpoint's secret (the whole `whsec_…` string)
//! over `"<t>.<raw body>"`. During a secret rotation's overlap the header
//! has one `v1` per valid secret, so a receiver holding either verifies.
//! [`verify`] accepts a delivery when some `v1` matches (compared in
//! constant time) and `t` is within the tolerance of the receiver's clock,
//! which bounds how long a captured delivery can be replayed. A receiver
//! then deduplicates on the event id ([`Verified::event_id`]): the same
//! event may arrive more than once, always under the same id.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use once_client::webhooks::{self, Tolerance};
//!
//! let secret = "whsec_test";
//! let body = br#"{"object":"event","id":"evt_1","type":"payment.succeeded","createdAt":"2026-12-07T16:00:00.000Z","data":{}}"#;
//! let now = SystemTime::now();
//! let header = webhooks::sign_for_tests(secret, now, body);
//! let event = webhooks::verify(&[secret], &header, body, Tolerance::default(), now).unwrap();
//! assert_eq!(event.event_id, "evt_1");
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The signature header's name.
pub const SIGNATURE_HEADER: &str = "Once-Signature";

/// How far `t` may be from the receiver's clock, either way.
#[derive(Debug, Clone, Copy)]
pub struct Tolerance(pub Duration);

impl Default for Tolerance {
    /// Five minutes, as most providers use.
    fn default() -> Self {
        Self(Duration::from_secs(300))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the Once-Signature header is malformed: {0}")]
    Malformed(&'static str),
    #[error("the signature's timestamp is {0:?} away from now, outside the tolerance")]
    OutsideTolerance(Duration),
    #[error("no signature matches any of the secrets")]
    NoMatch,
    #[error("the body is not an event: {0}")]
    NotAnEvent(String),
}

/// A delivery that verified: the event's id and type, to deduplicate and
/// dispatch on; the body itself is the caller's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub event_id: String,
    pub event_type: String,
    pub signed_at: i64,
}

/// The parts of a `Once-Signature` value: the timestamp and every `v1`.
/// Other schemes (`v0`, a later `v2`) are skipped, so a receiver keeps
/// verifying when the sender adds one.
pub fn parse_header(value: &str) -> Result<(i64, Vec<Vec<u8>>), VerifyError> {
    let mut t = None;
    let mut v1 = Vec::new();
    for part in value.split(',') {
        let (key, val) = part
            .trim()
            .split_once('=')
            .ok_or(VerifyError::Malformed("a part without '='"))?;
        match key {
            "t" => {
                if t.is_some() {
                    return Err(VerifyError::Malformed("two timestamps"));
                }
                t = Some(
                    val.parse::<i64>()
                        .map_err(|_| VerifyError::Malformed("t is not an integer"))?,
                );
            }
            "v1" => v1.push(hex::decode(val).map_err(|_| VerifyError::Malformed("v1 is not hex"))?),
            _ => {}
        }
    }
    let t = t.ok_or(VerifyError::Malformed("no timestamp"))?;
    if v1.is_empty() {
        return Err(VerifyError::Malformed("no v1 signature"));
    }
    Ok((t, v1))
}

fn mac(secret: &str, t: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// Verifies one delivery: `header` is the `Once-Signature` value, `body`
/// the raw bytes received (before any JSON parsing), `secrets` every secret
/// the receiver currently accepts (two during its own switch-over).
pub fn verify(
    secrets: &[&str],
    header: &str,
    body: &[u8],
    tolerance: Tolerance,
    now: SystemTime,
) -> Result<Verified, VerifyError> {
    let (t, signatures) = parse_header(header)?;
    let now_secs = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let skew = Duration::from_secs(now_secs.abs_diff(t));
    if skew > tolerance.0 {
        return Err(VerifyError::OutsideTolerance(skew));
    }
    // `verify_slice` compares in constant time; every pair is tried so the
    // time taken does not say which one matched.
    let mut matched = false;
    for secret in secrets {
        for signature in &signatures {
            matched |= mac(secret, t, body).verify_slice(signature).is_ok();
        }
    }
    if !matched {
        return Err(VerifyError::NoMatch);
    }
    #[derive(serde::Deserialize)]
    struct Envelope {
        id: String,
        #[serde(rename = "type")]
        event_type: String,
    }
    let envelope: Envelope =
        serde_json::from_slice(body).map_err(|e| VerifyError::NotAnEvent(e.to_string()))?;
    Ok(Verified {
        event_id: envelope.id,
        event_type: envelope.event_type,
        signed_at: t,
    })
}

/// A header as `once` would send for `body` at `at` (for a receiver's tests).
pub fn sign_for_tests(secret: &str, at: SystemTime, body: &[u8]) -> String {
    let t = at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    format!(
        "t={t},v1={}",
        hex::encode(mac(secret, t, body).finalize().into_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] =
        br#"{"object":"event","id":"evt_1","type":"payment.succeeded","createdAt":"x","data":{}}"#;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_signature_from_the_sender_verifies() {
        // The node's own test pins the same value (node/src/webhooks/signature.rs).
        let header =
            "t=1700000000,v1=35495024f4ef3f94e5a93e22221544c4b75e9a42300cd965ab81cb85cd994e91";
        let (t, v1) = parse_header(header).unwrap();
        assert_eq!(t, 1_700_000_000);
        assert!(mac("whsec_test", t, b"{}").verify_slice(&v1[0]).is_ok());
        let header = sign_for_tests("whsec_a", at(1_700_000_000), BODY);
        let verified = verify(
            &["whsec_a"],
            &header,
            BODY,
            Tolerance::default(),
            at(1_700_000_010),
        )
        .unwrap();
        assert_eq!(verified.event_id, "evt_1");
        assert_eq!(verified.event_type, "payment.succeeded");
    }

    #[test]
    fn a_wrong_secret_is_refused() {
        let header = sign_for_tests("whsec_a", at(1_700_000_000), BODY);
        assert_eq!(
            verify(
                &["whsec_b"],
                &header,
                BODY,
                Tolerance::default(),
                at(1_700_000_000)
            ),
            Err(VerifyError::NoMatch)
        );
    }

    #[test]
    fn a_modified_body_is_refused() {
        let header = sign_for_tests("whsec_a", at(1_700_000_000), BODY);
        let modified = String::from_utf8_lossy(BODY).replace("succeeded", "declined");
        assert_eq!(
            verify(
                &["whsec_a"],
                &header,
                modified.as_bytes(),
                Tolerance::default(),
                at(1_700_000_000)
            ),
            Err(VerifyError::NoMatch)
        );
    }

    #[test]
    fn an_old_or_future_timestamp_is_refused_even_when_signed_right() {
        let header = sign_for_tests("whsec_a", at(1_700_000_000), BODY);
        let tolerance = Tolerance(Duration::from_secs(300));
        assert!(verify(&["whsec_a"], &header, BODY, tolerance, at(1_700_000_300)).is_ok());
        assert_eq!(
            verify(&["whsec_a"], &header, BODY, tolerance, at(1_700_000_301)),
            Err(VerifyError::OutsideTolerance(Duration::from_secs(301)))
        );
        assert!(matches!(
            verify(&["whsec_a"], &header, BODY, tolerance, at(1_699_999_000)),
            Err(VerifyError::OutsideTolerance(_))
        ));
    }

    #[test]
    fn during_a_rotation_either_secret_verifies_the_two_signatures() {
        let t = at(1_700_000_000);
        let new = sign_for_tests("whsec_new", t, BODY);
        let old = sign_for_tests("whsec_old", t, BODY);
        let both = format!("{new},{}", old.split_once(',').unwrap().1);
        for secret in ["whsec_new", "whsec_old"] {
            assert!(
                verify(&[secret], &both, BODY, Tolerance::default(), t).is_ok(),
                "{secret}"
            );
        }
        assert_eq!(
            verify(&["whsec_other"], &both, BODY, Tolerance::default(), t),
            Err(VerifyError::NoMatch)
        );
    }

    #[test]
    fn malformed_headers_are_named() {
        for (header, why) in [
            ("", "a part without '='"),
            ("v1=00", "no timestamp"),
            ("t=1", "no v1 signature"),
            ("t=x,v1=00", "t is not an integer"),
            ("t=1,v1=zz", "v1 is not hex"),
            ("t=1,t=2,v1=00", "two timestamps"),
        ] {
            assert_eq!(
                parse_header(header),
                Err(VerifyError::Malformed(why)),
                "{header}"
            );
        }
        // Unknown schemes are skipped, not refused.
        assert!(parse_header("t=1,v0=abc,v1=00").is_ok());
    }
}
