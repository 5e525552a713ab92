//! The provider over HTTP.
//!
//! Every charge carries the provider idempotency key, so repeating a charge
//! can never charge twice: the provider answers a repeated key with its
//! first answer. That is what makes retries here safe, and why every failure
//! is retried within a budget that stays well inside the record's lease.
//!
//! How failures map (I5 — uncertainty never becomes a duplicate):
//!
//! | what happened | outcome |
//! |---|---|
//! | connection refused / DNS / TLS: the request never left | retried, then `NotCharged` |
//! | 5xx: the provider says it did not charge | retried, then `NotCharged` |
//! | timeout, reset or a cut answer after the request was sent | retried, then `Unknown` |
//! | 409 key reused with a different body, other 4xx | `NotCharged` (a bug; never retried) |

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tracing::{instrument, warn};

use super::{ChargeOutcome, ChargeRequest, PaymentProvider, ProviderError};

#[derive(Debug, Clone)]
pub struct HttpProviderConfig {
    pub base_url: String,
    pub connect_timeout: Duration,
    /// Per attempt, from sending to the last byte of the answer.
    pub request_timeout: Duration,
    pub attempts: u32,
    /// Doubled after every failed attempt.
    pub backoff: Duration,
}

impl HttpProviderConfig {
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(2),
            attempts: 3,
            backoff: Duration::from_millis(100),
        }
    }

    /// The longest one charge can take, every retry included. It must stay
    /// below the record's lease, so a live owner never loses its record
    /// while a charge is still in flight.
    pub fn worst_case(&self) -> Duration {
        let waits: Duration = (0..self.attempts.saturating_sub(1))
            .map(|i| self.backoff * 2u32.saturating_pow(i))
            .sum();
        (self.connect_timeout + self.request_timeout) * self.attempts + waits
    }
}

#[derive(Debug, Clone)]
pub struct HttpProvider {
    config: HttpProviderConfig,
    client: reqwest::Client,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ChargeBody<'a> {
    account_id: &'a str,
    amount_minor: i64,
    currency: &'a str,
    merchant_reference: &'a str,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChargeRecord {
    id: String,
    status: String,
    decline_code: Option<String>,
}

impl ChargeRecord {
    fn outcome(self) -> Result<ChargeOutcome, ProviderError> {
        match self.status.as_str() {
            "succeeded" => Ok(ChargeOutcome::Approved { charge_id: self.id }),
            "declined" => Ok(ChargeOutcome::Declined {
                code: self
                    .decline_code
                    .unwrap_or_else(|| "declined".into())
                    .to_ascii_uppercase(),
            }),
            other => Err(ProviderError::Unknown(format!(
                "provider reported status {other:?}"
            ))),
        }
    }
}

/// One attempt's failure, and whether the request may have been seen.
enum Attempt {
    NeverSent(String),
    Refused(String),
    MaybeSeen(String),
    Final(ProviderError),
}

impl HttpProvider {
    pub fn new(config: HttpProviderConfig) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self { config, client })
    }

    async fn charge_once(
        &self,
        provider_key: &str,
        request: &ChargeRequest,
    ) -> Result<ChargeOutcome, Attempt> {
        let body = ChargeBody {
            account_id: &request.account_id,
            amount_minor: request.amount.minor_units(),
            currency: request.amount.currency_code(),
            merchant_reference: &request.merchant_reference,
        };
        let mut trace = http::HeaderMap::new();
        once_telemetry::context::inject_current(&mut trace);
        let response = self
            .client
            .post(format!("{}/charges", self.config.base_url))
            .headers(trace)
            .header("idempotency-key", provider_key)
            .json(&body)
            .send()
            .await
            .map_err(classify)?;
        let status = response.status();
        if status.is_server_error() {
            return Err(Attempt::Refused(format!("provider answered {status}")));
        }
        if status.as_u16() == 201 || status.as_u16() == 200 || status.as_u16() == 402 {
            let record: ChargeRecord = response.json().await.map_err(classify)?;
            return record.outcome().map_err(Attempt::Final);
        }
        let text = response.text().await.unwrap_or_default();
        Err(Attempt::Final(ProviderError::NotCharged(format!(
            "provider rejected the charge ({status}): {text}"
        ))))
    }
}

fn classify(e: reqwest::Error) -> Attempt {
    if e.is_connect() {
        Attempt::NeverSent(format!("{e:#}"))
    } else {
        // Sent, then timed out, reset, or cut short: it may have charged.
        Attempt::MaybeSeen(format!("{e:#}"))
    }
}

#[async_trait]
impl PaymentProvider for HttpProvider {
    #[instrument(name = "charge at the provider", skip_all, fields(otel.kind = "client", provider_key = %provider_key))]
    async fn charge(
        &self,
        provider_key: &str,
        request: &ChargeRequest,
    ) -> Result<ChargeOutcome, ProviderError> {
        let mut maybe_seen = false;
        let mut last = String::new();
        for attempt in 0..self.config.attempts {
            if attempt > 0 {
                tokio::time::sleep(self.config.backoff * 2u32.saturating_pow(attempt - 1)).await;
            }
            match self.charge_once(provider_key, request).await {
                Ok(outcome) => return Ok(outcome),
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::NeverSent(why) | Attempt::Refused(why)) => last = why,
                Err(Attempt::MaybeSeen(why)) => {
                    maybe_seen = true;
                    last = why;
                }
            }
            warn!(attempt = attempt + 1, error = %last, "provider charge attempt failed; retrying under the same key");
        }
        // Once any attempt may have reached the provider, only a lookup by
        // key can say whether it charged.
        Err(if maybe_seen {
            ProviderError::Unknown(last)
        } else {
            ProviderError::NotCharged(last)
        })
    }

    #[instrument(
        name = "look up a charge at the provider",
        skip_all,
        fields(provider_key)
    )]
    async fn lookup(&self, provider_key: &str) -> Result<Option<ChargeOutcome>, ProviderError> {
        let mut trace = http::HeaderMap::new();
        once_telemetry::context::inject_current(&mut trace);
        let response = self
            .client
            .get(format!("{}/charges/{provider_key}", self.config.base_url))
            .headers(trace)
            .send()
            .await
            .map_err(|e| ProviderError::Unknown(format!("lookup failed: {e:#}")))?;
        match response.status().as_u16() {
            404 => Ok(None),
            200 => {
                let record: ChargeRecord = response.json().await.map_err(|e| {
                    ProviderError::Unknown(format!("lookup answer unreadable: {e:#}"))
                })?;
                record.outcome().map(Some)
            }
            status => Err(ProviderError::Unknown(format!("lookup answered {status}"))),
        }
    }
}
