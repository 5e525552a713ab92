//! The client's `Idempotency-Key`: 1–255 printable ASCII characters.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdempotencyKeyError {
    #[error("Idempotency-Key must not be empty")]
    Empty,
    #[error("Idempotency-Key must be at most {max} characters, got {len}", max = IdempotencyKey::MAX_LEN)]
    TooLong { len: usize },
    #[error("Idempotency-Key must be printable ASCII (0x20-0x7E)")]
    NotPrintableAscii,
}

impl IdempotencyKey {
    pub const MAX_LEN: usize = 255;

    /// Parses the raw header bytes. Header values are not guaranteed to be
    /// UTF-8, so the check runs on bytes.
    pub fn parse(raw: &[u8]) -> Result<Self, IdempotencyKeyError> {
        if raw.is_empty() {
            return Err(IdempotencyKeyError::Empty);
        }
        if raw.len() > Self::MAX_LEN {
            return Err(IdempotencyKeyError::TooLong { len: raw.len() });
        }
        if !raw.iter().all(|b| (0x20..=0x7e).contains(b)) {
            return Err(IdempotencyKeyError::NotPrintableAscii);
        }
        // Every byte is ASCII, so this cannot fail.
        Ok(Self(String::from_utf8_lossy(raw).into_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_printable_ascii_up_to_255() {
        assert!(IdempotencyKey::parse(b"a").is_ok());
        assert!(IdempotencyKey::parse(&[b'k'; 255]).is_ok());
        assert!(IdempotencyKey::parse(b"order 42 / retry ~!").is_ok());
    }

    #[test]
    fn rejects_empty_long_and_non_ascii() {
        assert_eq!(IdempotencyKey::parse(b""), Err(IdempotencyKeyError::Empty));
        assert_eq!(
            IdempotencyKey::parse(&[b'k'; 256]),
            Err(IdempotencyKeyError::TooLong { len: 256 })
        );
        assert_eq!(
            IdempotencyKey::parse("clé".as_bytes()),
            Err(IdempotencyKeyError::NotPrintableAscii)
        );
        assert_eq!(
            IdempotencyKey::parse(b"tab\there"),
            Err(IdempotencyKeyError::NotPrintableAscii)
        );
    }
}
