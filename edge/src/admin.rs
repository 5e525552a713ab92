//! The admin token: the one credential of operator endpoints in every role.
//!
//! It is a [`secrecy::SecretString`] inside, so it never prints through
//! `Debug` or a log line by accident, and it must be at least
//! [`AdminToken::MIN_LEN`] characters: a role given a shorter one refuses
//! to start. Presented tokens are compared as SHA-256 digests in constant
//! time, so neither timing nor length says how close a guess was. Pass it
//! by environment (`ONCE_ADMIN_TOKEN`), never on a command line, where
//! `ps` shows it.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use crate::api_keys::{bearer, digest};
use crate::error::ApiError;

/// An operator's bearer token, redacted everywhere it could print.
#[derive(Clone)]
pub struct AdminToken {
    secret: SecretString,
    digest: [u8; 32],
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AdminTokenError {
    #[error("the admin token must be at least {min} characters (got {got})", min = AdminToken::MIN_LEN)]
    TooShort { got: usize },
    #[error("the admin token must be printable ASCII without spaces (it travels in a header)")]
    NotPrintable,
}

impl AdminToken {
    /// Long enough that guessing is hopeless even without rate limits.
    pub const MIN_LEN: usize = 16;

    pub fn new(token: impl Into<String>) -> Result<Self, AdminTokenError> {
        let token: String = token.into();
        let got = token.trim().chars().count();
        if got < Self::MIN_LEN {
            return Err(AdminTokenError::TooShort { got });
        }
        if !token.trim().bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AdminTokenError::NotPrintable);
        }
        Ok(Self {
            digest: digest(token.trim()),
            secret: SecretString::from(token.trim().to_owned()),
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

    /// `Ok` for the operator, `401 UNAUTHORIZED` for anyone else.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.admits(headers) {
            Ok(())
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken([REDACTED])")
    }
}

/// The check of every operator endpoint: `401` unless the admin token is
/// presented; `404` when the role runs without one (the surface is off and
/// looks like a missing route).
pub fn check_operator(token: Option<&AdminToken>, headers: &HeaderMap) -> Result<(), ApiError> {
    token.ok_or(ApiError::NotFound)?.check(headers)
}

/// [`check_operator`] as a middleware of operator routes.
pub async fn require(
    State(token): State<Option<Arc<AdminToken>>>,
    request: Request,
    next: Next,
) -> Response {
    match check_operator(token.as_deref(), request.headers()) {
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
}
