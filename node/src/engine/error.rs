//! Why the engine could not answer a request from a record: its own error
//! type, so the recovery worker and operators' tooling handle engine
//! outcomes rather than HTTP responses. The HTTP edge maps each to the
//! documented status and code (`From<EngineError> for ApiError`).

use std::time::Duration;

use crate::error::ApiError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The key was first used for a different request (I2).
    #[error("the idempotency key was used for a different request")]
    KeyReusedWithDifferentRequest,
    /// Another request owns the key and its lease runs: ask again later.
    #[error("another request is running under this key")]
    InProgress { retry_after: Duration },
    /// Nothing is known to have happened; the same request may be retried
    /// (store unreachable, provider refused before charging, a lease that
    /// came back spent, a record from a newer release).
    #[error("temporarily unavailable: {0:#}")]
    Unavailable(anyhow::Error),
    /// This region is not the tenant's home (raft mode).
    #[error("tenant is served by region {home} (placement epoch {epoch})")]
    Misdirected { home: String, epoch: u64 },
    /// A broken invariant: a bug or corrupted data.
    #[error("internal error: {0:#}")]
    Internal(anyhow::Error),
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(cause) => Self::Unavailable(cause),
            StoreError::Misdirected { home, epoch } => Self::Misdirected { home, epoch },
            other => Self::Internal(other.into()),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::KeyReusedWithDifferentRequest => Self::KeyReusedWithDifferentRequest,
            EngineError::InProgress { retry_after } => Self::InProgress { retry_after },
            EngineError::Unavailable(cause) => Self::Unavailable(cause),
            EngineError::Misdirected { home, epoch } => Self::Misdirected { home, epoch },
            EngineError::Internal(cause) => Self::Internal(cause),
        }
    }
}
