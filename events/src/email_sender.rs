//! Sending an email: the [`EmailSender`] trait, the HTTP client that speaks
//! to an email service, and the in-memory fake used by tests and `once up`.
//!
//! Every email carries an idempotency token (the notification's dedupe key,
//! `receipt_payment_<payment id>`). The sender worker may send one
//! notification more than once (it crashed after sending, before marking it
//! sent); the receiving service dedupes on the token, so the customer gets
//! one email. Both implementations here honour that contract.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Email {
    pub to: String,
    pub subject: String,
    pub body: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("email service unreachable")]
    Unreachable(#[source] reqwest::Error),
    #[error("email service answered {0}")]
    Rejected(u16),
}

#[async_trait]
pub trait EmailSender: Send + Sync + std::fmt::Debug + 'static {
    /// Sends `email` under `token`. Sending the same token again must not
    /// produce a second email.
    async fn send(&self, token: &str, email: &Email) -> Result<(), SendError>;
}

/// `POST {url}` with the email as JSON and the token as `Idempotency-Key`.
/// Any 2xx is success (a sink answers 200 for a duplicate it dropped).
#[derive(Debug, Clone)]
pub struct HttpEmailSender {
    client: reqwest::Client,
    url: String,
}

impl HttpEmailSender {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("a reqwest client with a timeout builds"),
            url: url.into(),
        }
    }
}

#[async_trait]
impl EmailSender for HttpEmailSender {
    async fn send(&self, token: &str, email: &Email) -> Result<(), SendError> {
        let response = self
            .client
            .post(&self.url)
            .header("idempotency-key", token)
            .json(email)
            .send()
            .await
            .map_err(SendError::Unreachable)?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(SendError::Rejected(status.as_u16()))
        }
    }
}

/// The fake: keeps every email in memory, deduplicated by token, and counts
/// every send (including the ones it dropped as duplicates).
#[derive(Debug, Clone, Default)]
pub struct FakeEmailSender {
    state: Arc<Mutex<FakeState>>,
}

#[derive(Debug, Default)]
struct FakeState {
    delivered: BTreeMap<String, Email>,
    sends: u64,
}

impl FakeEmailSender {
    pub fn new() -> Self {
        Self::default()
    }

    /// Emails delivered, one per token.
    pub fn delivered(&self) -> BTreeMap<String, Email> {
        self.state
            .lock()
            .expect("fake sender lock")
            .delivered
            .clone()
    }

    /// Every call to `send`, duplicates included.
    pub fn sends(&self) -> u64 {
        self.state.lock().expect("fake sender lock").sends
    }
}

#[async_trait]
impl EmailSender for FakeEmailSender {
    async fn send(&self, token: &str, email: &Email) -> Result<(), SendError> {
        let mut state = self.state.lock().expect("fake sender lock");
        state.sends += 1;
        state
            .delivered
            .entry(token.to_owned())
            .or_insert_with(|| email.clone());
        Ok(())
    }
}
