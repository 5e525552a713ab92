//! The sealed blob: `[version 1][id length][key id][nonce 12][ciphertext
//! and 16-byte tag]`. The header (version and key id) is authenticated
//! with the caller's associated data, so neither can be altered unnoticed.

use aes_gcm::Nonce;
use aes_gcm::aead::{Aead, Payload};

use crate::key_ring::KeyRing;

/// The blob format this crate writes (the first byte of every blob).
pub const FORMAT_VERSION: u8 = 1;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;

/// Why a blob does not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Not a blob this crate wrote (too short, unknown version, bad key id).
    #[error("not a sealed blob: {0}")]
    Format(&'static str),
    /// Sealed under a key this ring does not list (retired too early, or
    /// the wrong key file).
    #[error("sealed under key {0:?}, which the key file does not list")]
    UnknownKey(String),
    /// The key is known but the blob does not authenticate: it was altered,
    /// or it belongs to another record or field.
    #[error(
        "sealed blob under key {0:?} failed authentication (altered, or moved from another record)"
    )]
    Tampered(String),
}

/// The key id a blob was sealed under, read without any key.
pub fn key_id_of(blob: &[u8]) -> Result<&str, SealError> {
    Ok(split(blob)?.key_id)
}

/// A blob's parts.
struct Parts<'a> {
    /// Version and key id: authenticated with the associated data.
    header: &'a [u8],
    key_id: &'a str,
    nonce: &'a [u8],
    ciphertext: &'a [u8],
}

fn split(blob: &[u8]) -> Result<Parts<'_>, SealError> {
    let (&version, rest) = blob.split_first().ok_or(SealError::Format("empty"))?;
    if version != FORMAT_VERSION {
        return Err(SealError::Format("unknown format version"));
    }
    let (&id_len, rest) = rest.split_first().ok_or(SealError::Format("truncated"))?;
    let id_len = usize::from(id_len);
    if rest.len() < id_len + NONCE_LEN + TAG_LEN {
        return Err(SealError::Format("truncated"));
    }
    let (id, rest) = rest.split_at(id_len);
    let id = std::str::from_utf8(id).map_err(|_| SealError::Format("key id is not text"))?;
    let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
    Ok(Parts {
        header: &blob[..2 + id_len],
        key_id: id,
        nonce,
        ciphertext,
    })
}

fn aad(header: &[u8], associated: &[u8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(header.len() + associated.len());
    aad.extend_from_slice(header);
    aad.extend_from_slice(associated);
    aad
}

impl KeyRing {
    /// Seals `plaintext` under the newest key, bound to `associated` (which
    /// must be given again, identical, to open it).
    pub fn seal(&self, plaintext: &[u8], associated: &[u8]) -> Vec<u8> {
        let key = self.sealing_key();
        let id = key.id.as_bytes();
        let mut nonce = [0u8; NONCE_LEN];
        rand::fill(&mut nonce);
        let mut blob = Vec::with_capacity(2 + id.len() + NONCE_LEN + plaintext.len() + TAG_LEN);
        blob.push(FORMAT_VERSION);
        blob.push(u8::try_from(id.len()).expect("key ids are at most 32 bytes"));
        blob.extend_from_slice(id);
        let aad = aad(&blob, associated);
        let ciphertext = key
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: &aad,
                },
            )
            .expect("AES-GCM encryption of an in-memory buffer cannot fail");
        blob.extend_from_slice(&nonce);
        blob.extend_from_slice(&ciphertext);
        blob
    }

    /// Opens a blob [`seal`](Self::seal) made under any listed key.
    pub fn open(&self, blob: &[u8], associated: &[u8]) -> Result<Vec<u8>, SealError> {
        let Parts {
            header,
            key_id: id,
            nonce,
            ciphertext,
        } = split(blob)?;
        let key = self
            .keys
            .iter()
            .find(|k| k.id == id)
            .ok_or_else(|| SealError::UnknownKey(id.to_owned()))?;
        key.cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad(header, associated),
                },
            )
            .map_err(|_| SealError::Tampered(id.to_owned()))
    }

    /// Whether `blob` is sealed under a key other than the newest one: the
    /// records re-encryption rewrites.
    pub fn is_stale(&self, blob: &[u8]) -> bool {
        key_id_of(blob).is_ok_and(|id| id != self.sealing_key_id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_blob_opens_to_its_plaintext_and_hides_it() {
        let ring = KeyRing::generate();
        let blob = ring.seal(b"account acct_123 paid 12.50", b"scope");
        assert_eq!(
            ring.open(&blob, b"scope").unwrap(),
            b"account acct_123 paid 12.50"
        );
        assert!(!blob.windows(8).any(|w| w == b"acct_123"));
        assert_eq!(key_id_of(&blob), Ok("k1"));
        assert_eq!(blob[0], FORMAT_VERSION);
    }

    #[test]
    fn the_same_plaintext_seals_differently_each_time() {
        let ring = KeyRing::generate();
        assert_ne!(ring.seal(b"x", b"a"), ring.seal(b"x", b"a"));
    }

    #[test]
    fn a_blob_moved_to_another_record_does_not_open() {
        let ring = KeyRing::generate();
        let blob = ring.seal(b"answer", b"tenant-a/key-1");
        assert_eq!(
            ring.open(&blob, b"tenant-b/key-1"),
            Err(SealError::Tampered("k1".into()))
        );
    }

    #[test]
    fn a_tampered_blob_is_refused_with_its_key_id() {
        let ring = KeyRing::generate();
        let mut blob = ring.seal(b"answer", b"ad");
        let last = blob.len() - 1;
        blob[last] ^= 1;
        let err = ring.open(&blob, b"ad").unwrap_err();
        assert_eq!(err, SealError::Tampered("k1".into()));
        assert!(err.to_string().contains("failed authentication"));
    }

    #[test]
    fn an_unknown_key_id_or_format_is_named() {
        let ring = KeyRing::generate();
        let other = KeyRing::generate().rotated();
        let blob = other.seal(b"answer", b"ad");
        assert_eq!(
            ring.open(&blob, b"ad"),
            Err(SealError::UnknownKey("k2".into()))
        );
        assert_eq!(ring.open(b"", b"ad"), Err(SealError::Format("empty")));
        assert_eq!(
            ring.open(b"\x07abc", b"ad"),
            Err(SealError::Format("unknown format version"))
        );
        assert_eq!(
            ring.open(b"\x01\x02k1", b"ad"),
            Err(SealError::Format("truncated"))
        );
        // Same key id, different key: authentication fails, never garbage.
        let stranger = KeyRing::generate().seal(b"answer", b"ad");
        assert_eq!(
            ring.open(&stranger, b"ad"),
            Err(SealError::Tampered("k1".into()))
        );
    }

    #[test]
    fn after_a_rotation_old_blobs_open_and_new_ones_use_the_new_key() {
        let ring = KeyRing::generate();
        let old = ring.seal(b"answer", b"ad");
        let rotated = ring.rotated();
        assert_eq!(rotated.open(&old, b"ad").unwrap(), b"answer");
        assert!(rotated.is_stale(&old));
        let new = rotated.seal(b"answer", b"ad");
        assert_eq!(key_id_of(&new), Ok("k2"));
        assert!(!rotated.is_stale(&new));
        assert_eq!(
            ring.open(&new, b"ad"),
            Err(SealError::UnknownKey("k2".into()))
        );
    }
}
