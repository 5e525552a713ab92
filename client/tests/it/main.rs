//! `once-client` against a scripted stand-in of the API ([`fake_api`]):
//! what a call sends on every attempt (`retries`), and what each final
//! answer becomes (`answers`).

mod answers;
mod fake_api;
mod retries;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use once_client::{
    Attempt, Backoff, Client, ClientBuilder, CreatePayment, CreatePaymentError, Created,
};

use crate::fake_api::FakeApi;

/// A client of `url` with a fast backoff (a `Retry-After` is capped at
/// `max`, 200 ms here), so scripts of several retries run quickly.
pub fn fast(url: &str) -> ClientBuilder {
    Client::builder(url, "sk_test_fake").backoff(Backoff {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(200),
        multiplier: 2.0,
    })
}

/// Every attempt the client reported, in order.
pub fn recorded(builder: ClientBuilder) -> (Client, Arc<Mutex<Vec<Attempt>>>) {
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let log = attempts.clone();
    let client = builder
        .observer(move |a: &Attempt| log.lock().unwrap().push(a.clone()))
        .build()
        .unwrap();
    (client, attempts)
}

/// One call through a [`fast`] client.
pub async fn send(api: &FakeApi, payment: CreatePayment) -> Result<Created, CreatePaymentError> {
    fast(&api.url)
        .build()
        .unwrap()
        .create_payment(payment)
        .await
}
