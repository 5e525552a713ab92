//! [`CreatePayment`]: the body of `POST /payments` (field for field, the
//! amount a decimal string as the API wants it), plus what belongs to the
//! call rather than the body: its `Idempotency-Key` and `traceparent`.

use bytes::Bytes;
use once_domain::IdempotencyKey;
use serde::Serialize;

use crate::trace::TraceParent;

/// `channel`: where the payment was taken. The server's default is `web`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Web,
    Mobile,
    Pos,
}

/// One logical payment. Build with [`CreatePayment::new`] and the setters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePayment {
    /// `[A-Za-z0-9_-]{1,64}`.
    pub account_id: String,
    /// A plain decimal string, e.g. `"10.00"`; never a float.
    pub amount: String,
    /// ISO 4217, e.g. `"EUR"`.
    pub currency: String,
    /// Unique per account: the business key that stops a second payment
    /// even under another idempotency key.
    pub merchant_reference: String,
    /// `None`: not sent (the server's default, `web`).
    pub channel: Option<Channel>,
    /// `None`: the client generates one (a UUID v7) for this call.
    pub idempotency_key: Option<IdempotencyKey>,
    /// `None`: the client starts a trace for this call.
    pub traceparent: Option<TraceParent>,
    /// `None`: the call ends at the client's deadline per call.
    pub until: Option<tokio::time::Instant>,
}

/// The JSON body, in the API's field names.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    account_id: &'a str,
    amount: &'a str,
    currency: &'a str,
    merchant_reference: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    channel: Option<Channel>,
}

impl CreatePayment {
    pub fn new(
        account_id: impl Into<String>,
        amount: impl Into<String>,
        currency: impl Into<String>,
        merchant_reference: impl Into<String>,
    ) -> Self {
        Self {
            account_id: account_id.into(),
            amount: amount.into(),
            currency: currency.into(),
            merchant_reference: merchant_reference.into(),
            channel: None,
            idempotency_key: None,
            traceparent: None,
            until: None,
        }
    }

    pub fn channel(mut self, channel: Channel) -> Self {
        self.channel = Some(channel);
        self
    }

    /// Use this key instead of a generated one: to ask again about a call
    /// that ended `Indeterminate`, or to tie the payment to an id of the
    /// caller's own (an order id, say).
    pub fn idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.idempotency_key = Some(key);
        self
    }

    /// Continue the caller's trace instead of starting one.
    pub fn traceparent(mut self, traceparent: TraceParent) -> Self {
        self.traceparent = Some(traceparent);
        self
    }

    /// End the call by `deadline` at the latest (the client's own deadline
    /// per call still applies): a load generator or a drill that must stop
    /// at a fixed moment gives every call the same end.
    pub fn until(mut self, deadline: tokio::time::Instant) -> Self {
        self.until = Some(deadline);
        self
    }

    /// The body's bytes, exactly as every attempt of the call sends them
    /// (serialized once per call, so a retry can never differ from the
    /// first attempt): what a caller that audits its own traffic hashes.
    pub fn body(&self) -> Bytes {
        let body = Body {
            account_id: &self.account_id,
            amount: &self.amount,
            currency: &self.currency,
            merchant_reference: &self.merchant_reference,
            channel: self.channel,
        };
        Bytes::from(serde_json::to_vec(&body).expect("a struct of strings serializes"))
    }
}

/// A fresh key for a call that was given none: a UUID v7 (time-ordered,
/// 36 printable ASCII characters, valid by the server's key rules).
pub(crate) fn generate_key() -> IdempotencyKey {
    let key = uuid::Uuid::now_v7().to_string();
    IdempotencyKey::parse(key.as_bytes()).expect("a UUID is printable ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_has_the_apis_field_names_and_leaves_out_an_unset_channel() {
        let request = CreatePayment::new("acc_1", "10.00", "EUR", "order-1");
        assert_eq!(
            request.body(),
            r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"order-1"}"#
        );
        let mobile = request.channel(Channel::Mobile);
        assert!(
            String::from_utf8_lossy(&mobile.body()).ends_with(r#","channel":"mobile"}"#),
            "{:?}",
            mobile.body()
        );
    }

    #[test]
    fn generated_keys_are_valid_and_distinct() {
        let (a, b) = (generate_key(), generate_key());
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 36);
    }
}
