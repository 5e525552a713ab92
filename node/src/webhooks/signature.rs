//! `Once-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>]` (decision 0092):
//! HMAC-SHA256 keyed by the endpoint's secret (the whole `whsec_…` string)
//! over `"<t>.<body>"`. During a rotation's overlap the header carries one
//! `v1` per valid secret, the newest first, so a receiver holding either
//! verifies. `once-client`'s `webhooks` module verifies it.

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const HEADER: &str = "once-signature";
/// The event id, also inside the body: what a receiver deduplicates on.
pub const EVENT_ID_HEADER: &str = "once-event-id";

/// The hex signature of `body` signed at `t` with `secret`.
pub fn sign(secret: &str, t: i64, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The header value for `body` signed at `t` by each of `secrets`.
pub fn header(secrets: &[&str], t: i64, body: &[u8]) -> String {
    let mut value = format!("t={t}");
    for secret in secrets {
        value.push_str(",v1=");
        value.push_str(&sign(secret, t, body));
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_the_hmac_of_the_timestamp_dot_body() {
        // Checked against `printf '1700000000.{}' | openssl dgst -sha256 -hmac whsec_test`.
        assert_eq!(
            sign("whsec_test", 1_700_000_000, b"{}"),
            "35495024f4ef3f94e5a93e22221544c4b75e9a42300cd965ab81cb85cd994e91"
        );
    }

    #[test]
    fn the_header_carries_one_v1_per_secret_newest_first() {
        let value = header(&["whsec_new", "whsec_old"], 7, b"x");
        assert_eq!(
            value,
            format!(
                "t=7,v1={},v1={}",
                sign("whsec_new", 7, b"x"),
                sign("whsec_old", 7, b"x")
            )
        );
    }
}
