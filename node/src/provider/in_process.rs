//! An in-memory provider: one ledger entry per key.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::{ChargeOutcome, ChargeRequest, PaymentProvider, ProviderError};
#[cfg(test)]
use crate::domain::Money;

/// Declines accounts with this prefix, like the simulator.
pub const NO_FUNDS_PREFIX: &str = "acc_nofunds";

/// An in-memory provider: one ledger entry per key.
#[derive(Debug, Default)]
pub struct InProcessProvider {
    // A std mutex: the critical section is a map lookup and never awaits.
    ledger: Mutex<HashMap<String, (ChargeRequest, ChargeOutcome)>>,
}

impl InProcessProvider {
    /// Number of approved charges, for tests.
    pub fn approved_charges(&self) -> usize {
        let ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        ledger
            .values()
            .filter(|(_, o)| matches!(o, ChargeOutcome::Approved { .. }))
            .count()
    }
}

#[async_trait]
impl PaymentProvider for InProcessProvider {
    async fn charge(
        &self,
        provider_key: &str,
        request: &ChargeRequest,
    ) -> Result<ChargeOutcome, ProviderError> {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((first, outcome)) = ledger.get(provider_key) {
            if first != request {
                return Err(ProviderError::NotCharged(format!(
                    "key {provider_key} reused with a different request"
                )));
            }
            return Ok(outcome.clone());
        }
        let outcome = if request.account_id.starts_with(NO_FUNDS_PREFIX) {
            ChargeOutcome::Declined {
                code: "INSUFFICIENT_FUNDS".into(),
            }
        } else {
            ChargeOutcome::Approved {
                charge_id: format!("ch_{}", uuid::Uuid::now_v7().simple()),
            }
        };
        ledger.insert(provider_key.to_owned(), (request.clone(), outcome.clone()));
        Ok(outcome)
    }

    async fn lookup(&self, provider_key: &str) -> Result<Option<ChargeOutcome>, ProviderError> {
        let ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        Ok(ledger.get(provider_key).map(|(_, o)| o.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(account: &str) -> ChargeRequest {
        ChargeRequest {
            account_id: account.into(),
            amount: Money::parse("1.00", "EUR").unwrap(),
            merchant_reference: "r".into(),
        }
    }

    #[tokio::test]
    async fn the_same_key_never_charges_twice() {
        let p = InProcessProvider::default();
        let a = p.charge("k", &request("acc_1")).await.unwrap();
        let b = p.charge("k", &request("acc_1")).await.unwrap();
        assert_eq!(a, b);
        assert_eq!(p.approved_charges(), 1);
        assert!(p.charge("k", &request("acc_2")).await.is_err());
        assert_eq!(p.lookup("k").await.unwrap(), Some(a));
        assert_eq!(p.lookup("other").await.unwrap(), None);
    }

    #[tokio::test]
    async fn no_funds_accounts_are_declined() {
        let p = InProcessProvider::default();
        let outcome = p.charge("k", &request("acc_nofunds_1")).await.unwrap();
        assert_eq!(
            outcome,
            ChargeOutcome::Declined {
                code: "INSUFFICIENT_FUNDS".into()
            }
        );
    }
}
