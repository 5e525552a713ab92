//! API-key authentication: `Authorization: Bearer <key>` → (tenant, principal),
//! for every role that answers tenants (node, router).
//!
//! Keys are random secrets, so they are stored and compared as SHA-256
//! digests: a fast hash is enough for high-entropy tokens, and the node never
//! holds a plaintext key longer than one request. The digest lookup goes
//! through a map, and the final equality check is constant-time, so response
//! timing says nothing about how close a guess was. Keys are never logged.
//!
//! Two sources, same format after hashing:
//! - `ONCE_API_KEYS=tenant:principal:key,...` for development and tests;
//! - a key file for production, one `tenant:principal:sha256hex` per line
//!   (`once keys hash` prints such a line), `#` comments allowed.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use anyhow::{Context, bail};
use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::identity::{PrincipalId, TenantId};

/// Who is calling: taken from the credential, never from the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub tenant: TenantId,
    pub principal: PrincipalId,
}

type KeyDigest = [u8; 32];

/// The set of accepted keys, by digest.
#[derive(Clone, Default)]
pub struct ApiKeys {
    by_digest: HashMap<KeyDigest, Caller>,
}

impl fmt::Debug for ApiKeys {
    // Digests are not secrets, but there is no reason to print them either.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKeys")
            .field("keys", &self.by_digest.len())
            .finish()
    }
}

pub fn digest(key: &str) -> KeyDigest {
    Sha256::digest(key.as_bytes()).into()
}

/// The key-file line for a plaintext key.
pub fn key_file_line(tenant: &TenantId, principal: &PrincipalId, key: &str) -> String {
    format!("{tenant}:{principal}:{}", hex::encode(digest(key)))
}

fn parse_caller(tenant: &str, principal: &str) -> anyhow::Result<Caller> {
    Ok(Caller {
        tenant: TenantId::parse(tenant).with_context(|| format!("invalid tenant id {tenant:?}"))?,
        principal: PrincipalId::parse(principal)
            .with_context(|| format!("invalid principal id {principal:?}"))?,
    })
}

impl ApiKeys {
    /// Parses `tenant:principal:key,...` (the `ONCE_API_KEYS` format).
    pub fn from_plaintext_list(list: &str) -> anyhow::Result<Self> {
        let mut keys = Self::default();
        for (n, entry) in list
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .enumerate()
        {
            let mut parts = entry.splitn(3, ':');
            let (Some(t), Some(p), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
                bail!("ONCE_API_KEYS entry {} is not tenant:principal:key", n + 1);
            };
            if key.len() < 16 {
                bail!(
                    "ONCE_API_KEYS entry {} has a key shorter than 16 characters",
                    n + 1
                );
            }
            keys.insert(digest(key), parse_caller(t, p)?)?;
        }
        Ok(keys)
    }

    /// Reads a key file of `tenant:principal:sha256hex` lines.
    pub fn from_hashed_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading key file {}", path.display()))?;
        let mut keys = Self::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.splitn(3, ':');
            let (Some(t), Some(p), Some(h)) = (parts.next(), parts.next(), parts.next()) else {
                bail!(
                    "{}:{}: expected tenant:principal:sha256hex",
                    path.display(),
                    n + 1
                );
            };
            let digest: KeyDigest = hex::decode(h)
                .ok()
                .and_then(|d| d.try_into().ok())
                .with_context(|| {
                    format!(
                        "{}:{}: digest must be 64 hex characters",
                        path.display(),
                        n + 1
                    )
                })?;
            keys.insert(digest, parse_caller(t, p)?)?;
        }
        Ok(keys)
    }

    pub fn merge(mut self, other: Self) -> anyhow::Result<Self> {
        for (digest, caller) in other.by_digest {
            self.insert(digest, caller)?;
        }
        Ok(self)
    }

    fn insert(&mut self, digest: KeyDigest, caller: Caller) -> anyhow::Result<()> {
        if self.by_digest.insert(digest, caller).is_some() {
            bail!("the same API key is configured twice");
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    pub fn authenticate(&self, presented: &str) -> Option<&Caller> {
        let presented = digest(presented);
        let (stored, caller) = self.by_digest.get_key_value(&presented)?;
        bool::from(stored.ct_eq(&presented)).then_some(caller)
    }
}

/// The bearer token of `Authorization: Bearer <token>`, if well formed.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// The caller [`crate::tenants::admit`] resolved. A route without that middleware
/// answers `401`: a handler that forgot it can never serve anonymously.
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        // Taken, not cloned: one handler extracts it once.
        parts
            .extensions
            .remove::<Caller>()
            .ok_or(ApiError::Unauthorized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_and_hashed_sources_agree() {
        let env = ApiKeys::from_plaintext_list("acme:checkout:sk_test_0123456789abcdef").unwrap();
        let line = key_file_line(
            &TenantId::parse("acme").unwrap(),
            &PrincipalId::parse("checkout").unwrap(),
            "sk_test_0123456789abcdef",
        );
        let dir = std::env::temp_dir().join(format!("once-keys-{}", std::process::id()));
        std::fs::write(&dir, format!("# comment\n{line}\n")).unwrap();
        let file = ApiKeys::from_hashed_file(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        for keys in [env, file] {
            let caller = keys.authenticate("sk_test_0123456789abcdef").unwrap();
            assert_eq!(caller.tenant.as_str(), "acme");
            assert!(keys.authenticate("sk_test_0123456789abcdeX").is_none());
        }
    }

    #[test]
    fn rejects_short_keys_and_duplicates() {
        assert!(ApiKeys::from_plaintext_list("a:b:short").is_err());
        assert!(ApiKeys::from_plaintext_list("a:b:0123456789abcdef,c:d:0123456789abcdef").is_err());
        assert!(ApiKeys::from_plaintext_list("a:b").is_err());
    }
}
