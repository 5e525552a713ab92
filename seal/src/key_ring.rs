//! The key ring and its file.
//!
//! The key file is text, one entry a line; blank lines and lines starting
//! with `#` are ignored:
//!
//! ```text
//! # once data keys
//! digest 3q2+7w...base64 of 32 bytes...=
//! k1 q83vEjRWeJA...base64 of 32 bytes...=
//! k2 ASNFZ4mrze8...base64 of 32 bytes...=
//! ```
//!
//! - `digest <key>`: exactly one, the key of the keyed digests. It is fixed
//!   for the life of the data: changing it makes every stored business key
//!   unequal to its new digest.
//! - `<key id> <key>`: at least one data key. A key id is 1–32 of
//!   `[A-Za-z0-9_-]` (not `digest`), unique in the file. The LAST data key
//!   seals everything new; every listed key opens. Rotating appends a line
//!   ([`KeyRing::rotated`]); retiring a key removes its line once no record
//!   is sealed under it any more.
//!
//! Keys are standard base64 (with padding) of 32 random bytes.

use std::path::{Path, PathBuf};

use aes_gcm::{Aes256Gcm, KeyInit};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use zeroize::{Zeroize, Zeroizing};

/// Why a key file is unusable. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("reading the key file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("key file line {line}: {reason}")]
    Line { line: usize, reason: String },
    #[error("the key file has no data key (a `<key id> <base64 key>` line)")]
    NoDataKey,
    #[error("the key file has no `digest <base64 key>` line")]
    NoDigestKey,
}

/// One data key: its id and its cipher (the key schedule holds the key).
pub(crate) struct DataKey {
    pub(crate) id: String,
    pub(crate) cipher: Aes256Gcm,
    /// The key as the file spells it, for writing the file back.
    encoded: Zeroizing<String>,
}

/// The data keys (file order: the last seals) and the digest key.
pub struct KeyRing {
    pub(crate) keys: Vec<DataKey>,
    pub(crate) digest_key: Zeroizing<[u8; 32]>,
    digest_encoded: Zeroizing<String>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing")
            .field("key_ids", &self.key_ids())
            .field("sealing_key", &self.sealing_key_id())
            .finish_non_exhaustive()
    }
}

fn valid_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 32
        && id != "digest"
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn decode_key(text: &str) -> Result<Zeroizing<[u8; 32]>, String> {
    let mut bytes = Zeroizing::new(
        STANDARD
            .decode(text)
            .map_err(|_| "the key is not valid base64".to_owned())?,
    );
    let mut key = Zeroizing::new([0u8; 32]);
    if bytes.len() != 32 {
        let n = bytes.len();
        bytes.zeroize();
        return Err(format!("a key must be 32 bytes, this one is {n}"));
    }
    key.copy_from_slice(&bytes);
    Ok(key)
}

fn random_key() -> Zeroizing<[u8; 32]> {
    let mut key = Zeroizing::new([0u8; 32]);
    rand::fill(&mut key[..]);
    key
}

impl DataKey {
    fn new(id: String, key: &[u8; 32]) -> Self {
        Self {
            cipher: Aes256Gcm::new(key.into()),
            encoded: Zeroizing::new(STANDARD.encode(key)),
            id,
        }
    }
}

impl KeyRing {
    /// Parses a key file's text (see the module docs for the format).
    pub fn parse(text: &str) -> Result<Self, KeyFileError> {
        let mut keys: Vec<DataKey> = Vec::new();
        let mut digest: Option<Zeroizing<[u8; 32]>> = None;
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: String| KeyFileError::Line {
                line: i + 1,
                reason,
            };
            let mut fields = line.split_whitespace();
            let (Some(name), Some(value), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(bad(
                    "expected `<key id> <base64 key>` or `digest <base64 key>`".into(),
                ));
            };
            let key = decode_key(value).map_err(bad)?;
            if name == "digest" {
                if digest.is_some() {
                    return Err(bad("a second `digest` line".into()));
                }
                digest = Some(key);
            } else if !valid_key_id(name) {
                return Err(bad(format!("key id {name:?} is not 1-32 of [A-Za-z0-9_-]")));
            } else if keys.iter().any(|k| k.id == name) {
                return Err(bad(format!("key id {name:?} is listed twice")));
            } else {
                keys.push(DataKey::new(name.to_owned(), &key));
            }
        }
        let digest_key = digest.ok_or(KeyFileError::NoDigestKey)?;
        if keys.is_empty() {
            return Err(KeyFileError::NoDataKey);
        }
        Ok(Self {
            keys,
            digest_encoded: Zeroizing::new(STANDARD.encode(*digest_key)),
            digest_key,
        })
    }

    /// Reads and parses the key file at `path`.
    pub fn load(path: &Path) -> Result<Self, KeyFileError> {
        let text =
            Zeroizing::new(
                std::fs::read_to_string(path).map_err(|source| KeyFileError::Io {
                    path: path.to_owned(),
                    source,
                })?,
            );
        Self::parse(&text)
    }

    /// A new ring: a random digest key and one random data key, `k1`.
    pub fn generate() -> Self {
        let digest_key = random_key();
        Self {
            keys: vec![DataKey::new("k1".into(), &random_key())],
            digest_encoded: Zeroizing::new(STANDARD.encode(*digest_key)),
            digest_key,
        }
    }

    /// This ring with a new random data key appended: it seals from now
    /// on. Its id is `k<n+1>`, `n` the highest number among the ids of
    /// that form, so a retired id is never reused.
    pub fn rotated(&self) -> Self {
        let next = self
            .keys
            .iter()
            .filter_map(|k| k.id.strip_prefix('k')?.parse::<u64>().ok())
            .max()
            .unwrap_or(0)
            + 1;
        let mut keys: Vec<DataKey> = self
            .keys
            .iter()
            .map(|k| DataKey {
                id: k.id.clone(),
                cipher: k.cipher.clone(),
                encoded: k.encoded.clone(),
            })
            .collect();
        keys.push(DataKey::new(format!("k{next}"), &random_key()));
        Self {
            keys,
            digest_key: self.digest_key.clone(),
            digest_encoded: self.digest_encoded.clone(),
        }
    }

    /// The key file's text for this ring (secret: write it with mode 0600).
    pub fn to_file_text(&self) -> Zeroizing<String> {
        let mut text = Zeroizing::new(String::from(
            "# once data keys (docs/decisions/0031-encryption-at-rest.md).\n\
             # `digest`: the business-key digest key, fixed for the life of the data.\n\
             # Every other line is a data key; the LAST one seals, every one opens.\n",
        ));
        text.push_str("digest ");
        text.push_str(&self.digest_encoded);
        text.push('\n');
        for key in &self.keys {
            text.push_str(&key.id);
            text.push(' ');
            text.push_str(&key.encoded);
            text.push('\n');
        }
        text
    }

    /// Writes a new key file at `path` with mode 0600 (fails if it exists).
    pub fn create_file(&self, path: &Path) -> Result<(), KeyFileError> {
        use std::io::Write;
        let io = |source| KeyFileError::Io {
            path: path.to_owned(),
            source,
        };
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(path).map_err(io)?;
        file.write_all(self.to_file_text().as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)
    }

    /// Replaces the key file at `path` atomically (a 0600 temp file beside
    /// it, renamed over it): a reader never sees half a file.
    pub fn replace_file(&self, path: &Path) -> Result<(), KeyFileError> {
        let tmp = path.with_extension("tmp-rotate");
        let _ = std::fs::remove_file(&tmp);
        self.create_file(&tmp)?;
        std::fs::rename(&tmp, path).map_err(|source| KeyFileError::Io {
            path: path.to_owned(),
            source,
        })
    }

    /// Every key id, oldest first.
    pub fn key_ids(&self) -> Vec<&str> {
        self.keys.iter().map(|k| k.id.as_str()).collect()
    }

    /// The id of the key that seals (the last one listed).
    pub fn sealing_key_id(&self) -> &str {
        &self.sealing_key().id
    }

    pub(crate) fn sealing_key(&self) -> &DataKey {
        self.keys.last().expect("a ring always has a data key")
    }

    /// Whether this ring's digest key is `other`'s: a reload that changes
    /// it must be refused (every stored digest would stop matching).
    pub fn same_digest_key(&self, other: &KeyRing) -> bool {
        use subtle::ConstantTimeEq;
        // Compared only on reload, but a key comparison should not leak.
        bool::from(self.digest_key[..].ct_eq(&other.digest_key[..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_line(id: &str, byte: u8) -> String {
        format!("{id} {}\n", STANDARD.encode([byte; 32]))
    }

    #[test]
    fn the_last_data_key_seals_and_comments_are_ignored() {
        let text = format!(
            "# comment\n\n{}{}{}",
            key_line("digest", 9),
            key_line("k1", 1),
            key_line("k2", 2)
        );
        let ring = KeyRing::parse(&text).unwrap();
        assert_eq!(ring.key_ids(), ["k1", "k2"]);
        assert_eq!(ring.sealing_key_id(), "k2");
    }

    #[test]
    fn a_bad_key_file_says_which_line_and_why() {
        let no_digest = KeyRing::parse(&key_line("k1", 1)).unwrap_err();
        assert!(matches!(no_digest, KeyFileError::NoDigestKey));
        let no_data = KeyRing::parse(&key_line("digest", 1)).unwrap_err();
        assert!(matches!(no_data, KeyFileError::NoDataKey));
        let short = KeyRing::parse(&format!("{}k1 AAAA\n", key_line("digest", 1))).unwrap_err();
        assert_eq!(
            short.to_string(),
            "key file line 2: a key must be 32 bytes, this one is 3"
        );
        let twice = KeyRing::parse(&format!(
            "{}{}{}",
            key_line("digest", 1),
            key_line("k1", 1),
            key_line("k1", 2)
        ))
        .unwrap_err();
        assert!(twice.to_string().contains("listed twice"), "{twice}");
        let bad_id = KeyRing::parse(&format!("{}{}", key_line("digest", 1), key_line("k/1", 1)))
            .unwrap_err();
        assert!(bad_id.to_string().contains("key id"), "{bad_id}");
    }

    #[test]
    fn debug_shows_key_ids_never_keys() {
        let ring = KeyRing::generate();
        let shown = format!("{ring:?}");
        assert!(shown.contains("k1"), "{shown}");
        assert!(!shown.contains(ring.sealing_key().encoded.as_str()));
        assert!(!shown.contains(ring.digest_encoded.as_str()));
    }

    #[test]
    fn rotation_appends_a_new_sealing_key_and_keeps_the_digest_key() {
        let ring = KeyRing::generate();
        let rotated = ring.rotated().rotated();
        assert_eq!(rotated.key_ids(), ["k1", "k2", "k3"]);
        assert!(rotated.same_digest_key(&ring));
        let reread = KeyRing::parse(&rotated.to_file_text()).unwrap();
        assert_eq!(reread.key_ids(), ["k1", "k2", "k3"]);
        assert!(reread.same_digest_key(&ring));
        assert!(!KeyRing::generate().same_digest_key(&ring));
    }

    #[cfg(unix)]
    #[test]
    fn a_created_key_file_is_private_and_replaced_whole() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data-keys");
        let ring = KeyRing::generate();
        ring.create_file(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(ring.create_file(&path).is_err(), "never overwrites");
        ring.rotated().replace_file(&path).unwrap();
        assert_eq!(KeyRing::load(&path).unwrap().key_ids(), ["k1", "k2"]);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
