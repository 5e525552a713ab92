//! How long certificates live: the lifetimes [`crate::LocalCa`] gives what
//! it issues, and reading a certificate file's validity back (what `once
//! up` renews by, and what tests check).
//!
//! Every certificate expires: leaves after [`DEFAULT_LEAF_LIFETIME`] (90
//! days) unless asked otherwise, the CA after [`DEFAULT_CA_LIFETIME`], and
//! no leaf outlives the CA that signed it. Validity starts
//! [`BACKDATE`] before issue, so a process whose clock runs behind (a
//! drill skews clocks by hours) still accepts a certificate made a moment
//! ago; expiry counts from the moment of issue, so a leaf never lasts
//! longer than its lifetime from when it was made.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::TlsError;

/// A leaf's lifetime when none is asked for.
pub const DEFAULT_LEAF_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);
/// A CA's lifetime when none is asked for: five years.
pub const DEFAULT_CA_LIFETIME: Duration = Duration::from_secs(5 * 365 * 24 * 3600);
/// How far before its issue a certificate is already valid.
pub const BACKDATE: Duration = Duration::from_secs(24 * 3600);

/// When a certificate starts and stops being valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Validity {
    /// Valid from [`BACKDATE`] before `now` for `lifetime` after it, but
    /// not past `cap` (the issuing CA's own expiry).
    pub fn from_now(now: SystemTime, lifetime: Duration, cap: Option<SystemTime>) -> Self {
        let not_after = now + lifetime;
        Self {
            not_before: now - BACKDATE,
            not_after: cap.map_or(not_after, |cap| cap.min(not_after)),
        }
    }

    /// What is left of it at `now` (zero once expired).
    pub fn remaining(&self, now: SystemTime) -> Duration {
        self.not_after.duration_since(now).unwrap_or_default()
    }

    /// The validity of the first certificate in the PEM text `pem`.
    pub fn of_pem(pem: &str) -> Result<Self, String> {
        let (_, block) =
            x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
        Self::of_der(&block.contents)
    }

    /// The validity of the DER certificate `der` (what a TLS peer presents).
    pub fn of_der(der: &[u8]) -> Result<Self, String> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
        let time = |t: x509_parser::time::ASN1Time| {
            let seconds = t.timestamp();
            if seconds >= 0 {
                SystemTime::UNIX_EPOCH + Duration::from_secs(seconds as u64)
            } else {
                SystemTime::UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs())
            }
        };
        Ok(Self {
            not_before: time(cert.validity().not_before),
            not_after: time(cert.validity().not_after),
        })
    }

    /// The validity of the certificate in the file at `path`.
    pub fn of_file(path: &Path) -> Result<Self, TlsError> {
        let pem = std::fs::read_to_string(path).map_err(|e| TlsError::io(path, e))?;
        Self::of_pem(&pem).map_err(|reason| TlsError::Pem {
            path: path.to_owned(),
            reason,
        })
    }
}

/// `t` as rcgen takes it.
pub(crate) fn offset_date_time(t: SystemTime) -> time::OffsetDateTime {
    time::OffsetDateTime::from(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaf_starts_a_day_early_and_never_outlives_its_lifetime_or_its_ca() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let day = Duration::from_secs(24 * 3600);
        let v = Validity::from_now(now, 90 * day, None);
        assert_eq!(v.not_before, now - day);
        assert_eq!(v.not_after, now + 90 * day);
        assert_eq!(v.remaining(now + 60 * day), 30 * day);
        assert_eq!(v.remaining(now + 91 * day), Duration::ZERO);
        let capped = Validity::from_now(now, 90 * day, Some(now + 10 * day));
        assert_eq!(capped.not_after, now + 10 * day);
    }
}
