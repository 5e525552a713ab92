//! Create one payment through a router (or a node) and print what came back.
//!
//! ```text
//! once up                                  # prints the router URL and demo keys
//! cargo run -p once-client --example create_payment -- \
//!     http://127.0.0.1:8080 <api key> acc_1 10.00 EUR order-1 [idempotency key]
//! ```
//!
//! Every attempt is printed as it happens. Run it twice with the same
//! idempotency key: the second run prints `replayed: true` and the same
//! payment. Without a key, one is generated and printed, to re-run with.

use std::time::Duration;

use once_client::{Attempt, Client, CreatePayment, CreatePaymentErrorKind, IdempotencyKey};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [
        url,
        api_key,
        account,
        amount,
        currency,
        reference,
        rest @ ..,
    ] = args.as_slice()
    else {
        eprintln!(
            "usage: create_payment URL API_KEY ACCOUNT AMOUNT CURRENCY REFERENCE [IDEMPOTENCY_KEY]"
        );
        std::process::exit(64);
    };
    let client = Client::builder(url, api_key)
        .deadline(Duration::from_secs(30))
        .observer(|a: &Attempt| {
            eprintln!(
                "attempt {} key={} status={:?} code={:?} region={:?} replayed={} error={:?} in {:?}",
                a.number,
                a.idempotency_key.as_ref().map_or("-", IdempotencyKey::as_str),
                a.status,
                a.error_code,
                a.region,
                a.replayed,
                a.transport_error,
                a.elapsed,
            );
        })
        .build()?;
    let mut request = CreatePayment::new(account, amount, currency, reference);
    if let Some(key) = rest.first() {
        request = request.idempotency_key(IdempotencyKey::parse(key.as_bytes())?);
    }
    match client.create_payment(request).await {
        Ok(created) => {
            println!(
                "payment {} {:?} {} {} (replayed: {}, key {}, {} attempts, region {:?})",
                created.payment.id,
                created.payment.status,
                created.payment.amount.value,
                created.payment.amount.currency,
                created.replayed,
                created.idempotency_key,
                created.attempts,
                created.region,
            );
            Ok(())
        }
        Err(error) => {
            match &error.kind {
                CreatePaymentErrorKind::Indeterminate { .. } => eprintln!(
                    "outcome unknown: run again with idempotency key {}",
                    error.idempotency_key
                ),
                kind => eprintln!("refused: {kind}"),
            }
            Err(error.into())
        }
    }
}
