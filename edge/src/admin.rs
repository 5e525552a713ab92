//! The admin token: the credential of operator endpoints in every role
//! (each role its own: node admin, router admin, store operator).
//!
//! It is a [`secrecy::SecretString`] inside, so it never prints through
//! `Debug` or a log line by accident. It must be at least
//! [`AdminToken::MIN_LEN`] characters and hard to guess: at least
//! [`AdminToken::MIN_BITS`] bits by its own characters' distribution
//! (length × the Shannon entropy of its characters) and at least
//! [`AdminToken::MIN_TENTHS_PER_CHAR`] tenths of a bit per character. A
//! role given a shorter or a weaker one (`aaaaaaaaaaaaaaaa`,
//! `passwordpassword`, `ab` forty times) refuses to start. The estimate
//! cannot see a pattern (`0123456789abcdef` passes, just): it catches
//! repetition and small alphabets; tokens are meant to be generated
//! (`once up` does; `openssl rand -hex 32` carries about 250 bits by this
//! measure).
//!
//! Presented tokens are compared as SHA-256 digests in constant time, so
//! neither timing nor length says how close a guess was, and a peer that
//! keeps presenting wrong ones is slowed ([`crate::admin_throttle`]:
//! `429 RATE_LIMITED` with `Retry-After`). Pass it by environment
//! (`ONCE_ADMIN_TOKEN`), never on a command line, where `ps` shows it.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{Extensions, HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use crate::admin_throttle::FailedAdminAuth;
use crate::api_keys::{bearer, digest};
use crate::error::{ApiError, ErrorBody, ErrorCode, retry_after_secs};
use crate::server::PeerAddr;

/// An operator's bearer token, redacted everywhere it could print. Its
/// clones share one count of failed attempts per peer.
#[derive(Clone)]
pub struct AdminToken {
    secret: SecretString,
    digest: [u8; 32],
    failures: Arc<FailedAdminAuth>,
}

/// Why an operator request was refused.
#[derive(Debug, thiserror::Error)]
pub enum AdminRefusal {
    /// No token, a wrong one, or no operator surface (404).
    #[error(transparent)]
    Api(#[from] ApiError),
    /// This peer presented too many wrong tokens lately; whatever it
    /// presents now is refused for `retry_after`.
    #[error(
        "too many failed admin authentications from this address; retry after the Retry-After delay"
    )]
    Throttled { retry_after: Duration },
}

impl IntoResponse for AdminRefusal {
    fn into_response(self) -> Response {
        match self {
            Self::Api(e) => e.into_response(),
            Self::Throttled { retry_after } => {
                let body = ErrorBody {
                    error_code: ErrorCode::RateLimited,
                    message: self.to_string(),
                    payment_id: None,
                    home_region: None,
                    placement_epoch: None,
                };
                let mut response = (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, retry_after_secs(retry_after));
                response
            }
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AdminTokenError {
    #[error("the admin token must be at least {min} characters (got {got})", min = AdminToken::MIN_LEN)]
    TooShort { got: usize },
    #[error("the admin token must be printable ASCII without spaces (it travels in a header)")]
    NotPrintable,
    #[error(
        "the admin token is too easy to guess: about {bits} bits, {per_char_tenths} tenths of a bit per character (at least {min} and {min_per_char} tenths needed: it repeats or uses too few distinct characters); generate one, e.g. `openssl rand -hex 32`",
        min = AdminToken::MIN_BITS,
        min_per_char = AdminToken::MIN_TENTHS_PER_CHAR
    )]
    Weak { bits: u32, per_char_tenths: u32 },
}

/// `token`'s length times the Shannon entropy of its own characters, in
/// bits: 0 for one character repeated, 4 per character for 16 distinct
/// ones used equally.
fn estimated_bits(token: &str) -> f64 {
    let mut counts = std::collections::BTreeMap::<char, usize>::new();
    for c in token.chars() {
        *counts.entry(c).or_default() += 1;
    }
    let len = token.chars().count() as f64;
    let per_char: f64 = counts
        .values()
        .map(|&n| {
            let p = n as f64 / len;
            -p * p.log2()
        })
        .sum();
    per_char * len
}

impl AdminToken {
    /// Long enough that guessing is hopeless even without rate limits.
    pub const MIN_LEN: usize = 16;
    /// What [`estimated_bits`] must reach: 16 distinct characters used
    /// equally, the least a 16-character token can be.
    pub const MIN_BITS: u32 = 64;
    /// And per character, in tenths of a bit: an alphabet of at least 8
    /// characters used evenly, so length alone (`ab` repeated) is not
    /// enough. Hex is 40, words with dashes and digits about 34.
    pub const MIN_TENTHS_PER_CHAR: u32 = 30;

    pub fn new(token: impl Into<String>) -> Result<Self, AdminTokenError> {
        let token: String = token.into();
        let got = token.trim().chars().count();
        if got < Self::MIN_LEN {
            return Err(AdminTokenError::TooShort { got });
        }
        if !token.trim().bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AdminTokenError::NotPrintable);
        }
        // Rounded: 16 distinct characters are 64 bits, give or take the
        // last bit of a float.
        let estimate = estimated_bits(token.trim());
        let bits = estimate.round() as u32;
        let per_char_tenths = (estimate * 10.0 / got as f64).round() as u32;
        if bits < Self::MIN_BITS || per_char_tenths < Self::MIN_TENTHS_PER_CHAR {
            return Err(AdminTokenError::Weak {
                bits,
                per_char_tenths,
            });
        }
        Ok(Self {
            digest: digest(token.trim()),
            secret: SecretString::from(token.trim().to_owned()),
            failures: Arc::default(),
        })
    }

    /// The plaintext, for the few places that must send it (an operator
    /// command calling a role's admin endpoint).
    pub fn expose(&self) -> &str {
        self.secret.expose_secret()
    }

    /// Whether `headers` carry `Authorization: Bearer <this token>`.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        bearer(headers).is_some_and(|presented| bool::from(digest(presented).ct_eq(&self.digest)))
    }

    /// `Ok` for the operator, `401 UNAUTHORIZED` for anyone else, and
    /// `429` for a `peer` that has presented too many wrong tokens lately
    /// (before its token is even looked at: see [`crate::admin_throttle`]).
    /// Without a peer address (an in-process call) nothing is throttled.
    pub fn check(
        &self,
        headers: &HeaderMap,
        peer: Option<std::net::IpAddr>,
    ) -> Result<(), AdminRefusal> {
        let now = Instant::now();
        if let Some(peer) = peer {
            self.failures
                .admit(peer, now)
                .map_err(|retry_after| AdminRefusal::Throttled { retry_after })?;
        }
        if self.admits(headers) {
            return Ok(());
        }
        if let Some(peer) = peer {
            self.failures.failed(peer, now);
            tracing::warn!(%peer, "admin authentication failed");
        }
        Err(ApiError::Unauthorized.into())
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken([REDACTED])")
    }
}

/// The check of every operator endpoint: `401` unless the admin token is
/// presented; `404` when the role runs without one (the surface is off and
/// looks like a missing route); `429` for a peer (the [`PeerAddr`] the
/// server put in `extensions`) slowed for its failures.
pub fn check_operator(
    token: Option<&AdminToken>,
    headers: &HeaderMap,
    extensions: &Extensions,
) -> Result<(), AdminRefusal> {
    let peer = extensions.get::<PeerAddr>().map(|p| p.0.ip());
    token.ok_or(ApiError::NotFound)?.check(headers, peer)
}

/// [`check_operator`] as a middleware of operator routes.
pub async fn require(
    State(token): State<Option<Arc<AdminToken>>>,
    request: Request,
    next: Next,
) -> Response {
    match check_operator(token.as_deref(), request.headers(), request.extensions()) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use axum::http::header::AUTHORIZATION;

    #[test]
    fn short_tokens_are_refused_and_tokens_never_print() {
        assert_eq!(
            AdminToken::new("abc").unwrap_err(),
            AdminTokenError::TooShort { got: 3 }
        );
        assert_eq!(
            AdminToken::new("0123456789 abcdef").unwrap_err(),
            AdminTokenError::NotPrintable
        );
        for weak in [
            "aaaaaaaaaaaaaaaa",
            "abababababababababababab",
            "passwordpassword",
        ] {
            let error = AdminToken::new(weak).unwrap_err();
            assert!(matches!(error, AdminTokenError::Weak { .. }), "{weak}");
            assert!(error.to_string().contains("openssl rand"), "{error}");
        }
        assert_eq!(
            AdminToken::new("aaaaaaaaaaaaaaaa").unwrap_err(),
            AdminTokenError::Weak {
                bits: 0,
                per_char_tenths: 0
            }
        );
        // Long and repetitive is still weak; short and varied is enough.
        assert!(AdminToken::new("ab".repeat(40)).is_err());
        AdminToken::new("0123456789abcdef").unwrap();
        AdminToken::new(format!("adm_{}", "3f9a0c7e1b5d2486".repeat(4))).unwrap();
        let token = AdminToken::new("0123456789abcdef-secret").unwrap();
        assert!(!format!("{token:?}").contains("secret"));
        let mut headers = HeaderMap::new();
        assert!(!token.admits(&headers));
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Bearer 0123456789abcdef-secreT"),
        );
        assert!(!token.admits(&headers));
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Bearer 0123456789abcdef-secret"),
        );
        assert!(token.admits(&headers));
    }

    #[test]
    fn a_peer_guessing_is_slowed_and_then_refused_even_the_right_token() {
        let token = AdminToken::new("0123456789abcdef-secret").unwrap();
        let guesser: std::net::IpAddr = "10.0.0.5".parse().unwrap();
        let operator: std::net::IpAddr = "10.0.0.6".parse().unwrap();
        let mut wrong = HeaderMap::new();
        wrong.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Bearer 0123456789abcdef-guess"),
        );
        let mut right = HeaderMap::new();
        right.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Bearer 0123456789abcdef-secret"),
        );
        for _ in 0..FailedAdminAuth::BURST {
            let refused = token.check(&wrong, Some(guesser)).unwrap_err();
            assert!(
                matches!(refused, AdminRefusal::Api(ApiError::Unauthorized)),
                "{refused}"
            );
        }
        // Its clones (every route's state) count the same failures.
        let clone = token.clone();
        for headers in [&wrong, &right] {
            let refused = clone.check(headers, Some(guesser)).unwrap_err();
            let response = refused.into_response();
            assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        }
        token
            .check(&right, Some(operator))
            .expect("another peer is not slowed");
        token
            .check(&right, None)
            .expect("an in-process call is not throttled");
    }
}
