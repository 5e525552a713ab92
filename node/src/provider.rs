//! The payment provider, seen from the node: a charge is made under a
//! provider idempotency key (`provider_payment_<payment id>`), and the
//! provider can be asked what happened under that key. That pair is what
//! lets a retry or a recovery finish a payment without charging twice (I5).
//!
//! - [`HttpProvider`]: a provider over HTTP (production, and the simulator
//!   that `once up`, the drills and the recovery tests use).
//! - [`InProcessProvider`]: an in-memory stand-in for tests of the contract
//!   that do not need a provider process; it dedupes on the key and declines
//!   accounts whose id starts with `acc_nofunds`, as the simulator does.

use async_trait::async_trait;

use crate::domain::Money;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeRequest {
    pub account_id: String,
    pub amount: Money,
    pub merchant_reference: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChargeOutcome {
    Approved { charge_id: String },
    Declined { code: String },
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The provider certainly did not charge (it said so, or the request
    /// never left): safe to mark the operation retryable.
    #[error("provider refused the charge before making it: {0}")]
    NotCharged(String),
    /// The request may have reached the provider: the outcome is unknown
    /// and only a lookup by key may settle it.
    #[error("provider outcome unknown: {0}")]
    Unknown(String),
}

#[async_trait]
pub trait PaymentProvider: Send + Sync + std::fmt::Debug + 'static {
    /// Charges once per `provider_key`; repeating the key returns the first
    /// outcome without charging again.
    async fn charge(
        &self,
        provider_key: &str,
        request: &ChargeRequest,
    ) -> Result<ChargeOutcome, ProviderError>;

    /// What happened under `provider_key`, if anything.
    async fn lookup(&self, provider_key: &str) -> Result<Option<ChargeOutcome>, ProviderError>;
}

mod http;
mod in_process;

pub use http::{HttpProvider, HttpProviderConfig};
pub use in_process::InProcessProvider;
