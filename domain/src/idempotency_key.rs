//! The client's `Idempotency-Key`: 1–255 printable ASCII characters. The
//! bounds are constants so the API document's pattern
//! ([`IdempotencyKey::pattern`]) is made of the same numbers `parse` checks.

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
    /// The printable ASCII range every byte of a key is in.
    pub const CHARS: std::ops::RangeInclusive<u8> = 0x20..=0x7e;

    /// What `parse` accepts, as an anchored regular expression for the API
    /// document (the same syntax in JSON Schema, Python and the `regex` crate).
    pub fn pattern() -> String {
        format!(
            "^[\\x{:02X}-\\x{:02X}]{{1,{}}}$",
            Self::CHARS.start(),
            Self::CHARS.end(),
            Self::MAX_LEN
        )
    }

    /// Parses the raw header bytes. Header values are not guaranteed to be
    /// UTF-8, so the check runs on bytes.
    pub fn parse(raw: &[u8]) -> Result<Self, IdempotencyKeyError> {
        if raw.is_empty() {
            return Err(IdempotencyKeyError::Empty);
        }
        if raw.len() > Self::MAX_LEN {
            return Err(IdempotencyKeyError::TooLong { len: raw.len() });
        }
        if !raw.iter().all(|b| Self::CHARS.contains(b)) {
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

    #[test]
    fn the_documented_pattern_accepts_exactly_what_parse_accepts() {
        let pattern = regex::Regex::new(&IdempotencyKey::pattern()).unwrap();
        let mut samples: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"order-42".to_vec(),
            b"order 42 / retry ~!".to_vec(),
            b" ".to_vec(),
            b"line\nbreak".to_vec(),
            b"trailing\n".to_vec(),
            "clé".as_bytes().to_vec(),
            vec![b'k'; 254],
            vec![b'k'; 255],
            vec![b'k'; 256],
        ];
        // Every byte alone, and inside an otherwise valid key.
        samples.extend((0..=u8::MAX).flat_map(|b| [vec![b], vec![b'a', b, b'z']]));
        for raw in samples {
            let documented = std::str::from_utf8(&raw).is_ok_and(|s| pattern.is_match(s));
            assert_eq!(
                documented,
                IdempotencyKey::parse(&raw).is_ok(),
                "{raw:?} against {pattern}"
            );
        }
    }
}
