//! Keyed digests: HMAC-SHA256 under the ring's digest key, for values a
//! store only compares for equality (raft-store's business keys). Without
//! the key a digest cannot be checked against guessed account ids.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::key_ring::KeyRing;

impl KeyRing {
    /// The hex HMAC-SHA256 of `parts`, each length-prefixed so that
    /// `("ab", "c")` and `("a", "bc")` differ. Equal across rotations of
    /// the data keys (the digest key never rotates).
    pub fn digest(&self, parts: &[&[u8]]) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.digest_key[..])
            .expect("HMAC takes a key of any length");
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        hex::encode(mac.finalize().into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_stable_across_rotation_and_keyed() {
        let ring = KeyRing::generate();
        let d = ring.digest(&[b"acme", b"acct_1"]);
        assert_eq!(d.len(), 64);
        assert_eq!(ring.rotated().digest(&[b"acme", b"acct_1"]), d);
        assert_ne!(ring.digest(&[b"acme", b"acct_2"]), d);
        assert_ne!(ring.digest(&[b"acmea", b"cct_1"]), d);
        assert_ne!(KeyRing::generate().digest(&[b"acme", b"acct_1"]), d);
    }
}
