//! Where raft-store's record meets the node's typed one: scope and record
//! parsing (raft-store's strings into the node's domain types), the fence's
//! width, and the payment facts stored opaquely in each record.
//!
//! Status, step and stored response need no mapping: they are one type,
//! `once_store_client::command`'s, in both crates
//! (docs/decisions/0027-one-record-model.md). The answer and the payment
//! facts are sealed in raft-store ([`DataKeys`], decision 0031): they are
//! opened here, at the boundary.

use once_store_client::command as rs;
use serde::{Deserialize, Serialize};

use crate::data_keys::DataKeys;
use crate::domain::{IdempotencyKey, Money, PaymentId, PrincipalId, TenantId, UnixMillis};
use crate::idempotency::record::{Record, Scope, Status, known_operation};
use crate::payments::command::Channel;
use crate::payments::model::{NewPayment, Payment, PaymentStatus};
use crate::payments::response::ResponseSchema;
use crate::store::StoreError;

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(format!("raft-store record: {what}"))
}

pub fn scope_from_store(scope: &rs::Scope) -> Result<Scope, StoreError> {
    Ok(Scope {
        tenant: TenantId::parse(&scope.tenant).ok_or_else(|| corrupt("tenant"))?,
        principal: PrincipalId::parse(&scope.principal).ok_or_else(|| corrupt("principal"))?,
        operation: known_operation(&scope.operation).ok_or_else(|| corrupt("operation"))?,
        key: IdempotencyKey::parse(scope.key.as_bytes()).map_err(|_| corrupt("key"))?,
    })
}

pub fn record_from_store(r: rs::Record, keys: &DataKeys) -> Result<Record, StoreError> {
    let response = r
        .response
        .as_ref()
        .map(|blob| keys.open_answer(&r.scope, blob))
        .transpose()?;
    Ok(Record {
        scope: scope_from_store(&r.scope)?,
        fingerprint_version: r.fingerprint_version,
        fingerprint: r.fingerprint,
        status: r.status,
        step: r.step,
        fence: i64::try_from(r.fence).map_err(|_| corrupt("fence"))?,
        locked_until: UnixMillis(r.locked_until),
        payment_id: r
            .payment_id
            .map(|id| PaymentId::parse(&id).ok_or_else(|| corrupt("payment id")))
            .transpose()?,
        provider_key: r.provider_key,
        response,
        error_code: r.error_code,
        trace_id: r.trace_id,
        region: r.region,
        takeovers: r.takeovers,
        created_at: UnixMillis(r.created_at),
        updated_at: UnixMillis(r.updated_at),
        expires_at: r.expires_at.map(UnixMillis),
    })
}

/// A fence as raft-store counts it (always ≥ 1 for a real record).
pub fn fence_to_store(fence: i64) -> u64 {
    u64::try_from(fence).unwrap_or(0)
}

/// The payment a record creates, as stored in the record's payload: enough
/// for any region to call the provider and to materialize the row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentFacts {
    pub id: String,
    pub tenant: String,
    pub account_id: String,
    pub merchant_reference: String,
    pub amount_minor: i64,
    pub currency: String,
    pub channel: String,
    /// The region that first created it.
    pub region: String,
    /// The proposing node's clock, kept for diagnosis: the payment's
    /// creation time is the record's, stamped by the leader.
    pub created_at: i64,
    /// The response schema the claiming node renders answers with: a
    /// later owner renders the same shape (`Owned::answer_schema`). Absent
    /// in facts written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<i32>,
}

impl PaymentFacts {
    pub fn of(payment: &NewPayment, now: UnixMillis, schema: ResponseSchema) -> Self {
        Self {
            id: payment.id.as_str().to_owned(),
            tenant: payment.tenant.as_str().to_owned(),
            account_id: payment.account_id.clone(),
            merchant_reference: payment.merchant_reference.clone(),
            amount_minor: payment.amount.minor_units(),
            currency: payment.amount.currency_code().to_owned(),
            channel: payment.channel.as_str().to_owned(),
            region: payment.region.clone(),
            created_at: now.0,
            response_schema: Some(schema.version()),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("payment facts always serialize")
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        serde_json::from_slice(bytes).map_err(|_| corrupt("payment facts"))
    }

    /// The schema the claiming node answered with, if the facts say and
    /// this build knows it.
    pub fn answer_schema(&self) -> Option<ResponseSchema> {
        self.response_schema.and_then(ResponseSchema::from_version)
    }

    pub fn payment(&self) -> Result<NewPayment, StoreError> {
        Ok(NewPayment {
            id: PaymentId::parse(&self.id).ok_or_else(|| corrupt("payment id"))?,
            tenant: TenantId::parse(&self.tenant).ok_or_else(|| corrupt("tenant"))?,
            account_id: self.account_id.clone(),
            merchant_reference: self.merchant_reference.clone(),
            amount: Money::from_minor(self.amount_minor, &self.currency)
                .map_err(|_| corrupt("currency"))?,
            channel: Channel::parse(&self.channel).ok_or_else(|| corrupt("channel"))?,
            region: self.region.clone(),
        })
    }
}

/// The payment a record created, as far as the record tells: what a region
/// that does not hold the payment's row answers for it. `None` when the
/// record carries no payment.
///
/// An expired record has no payload any more (expiry drops it with the
/// answer): its payment is known only where its row is.
pub fn payment_of_record(r: &rs::Record, keys: &DataKeys) -> Result<Option<Payment>, StoreError> {
    let Some(blob) = &r.payload else {
        return Ok(None);
    };
    let payload = keys.open_payload(&r.scope, blob)?;
    let status = match r.status {
        Status::Completed => PaymentStatus::Succeeded,
        // A replayable failure with a payment is the provider's decline.
        Status::FailedReplayable => PaymentStatus::Declined,
        Status::InProgress | Status::UnknownRequiresRecovery | Status::FailedRetryable => {
            PaymentStatus::Pending
        }
        // Only finished records expire; the error code outlives the body.
        // (Expiry drops the payload too, so this is for records written
        // before it did.)
        Status::Expired if r.error_code.is_some() => PaymentStatus::Declined,
        Status::Expired => PaymentStatus::Succeeded,
    };
    let facts = PaymentFacts::decode(&payload)?;
    let payment = facts.payment()?;
    Ok(Some(Payment {
        id: payment.id,
        tenant: payment.tenant,
        account_id: payment.account_id,
        merchant_reference: payment.merchant_reference,
        amount: payment.amount,
        channel: payment.channel,
        status,
        provider_charge_id: None,
        decline_code: None,
        // The region that took the payment, as its row says in every
        // region holding one and as its answer says (`final_state`).
        region: facts.region.clone(),
        // Stamped by the leader with the claim (or the renewal) that
        // created the payment; `facts.created_at` is the node's clock.
        created_at: UnixMillis(r.created_at),
        updated_at: UnixMillis(r.updated_at),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payment_facts_round_trip() {
        let payment = NewPayment {
            id: PaymentId::generate(),
            tenant: TenantId::parse("acme").unwrap(),
            account_id: "acct_1".into(),
            merchant_reference: "order-1".into(),
            amount: Money::parse("12.50", "EUR").unwrap(),
            channel: Channel::DEFAULT,
            region: "eu-west".into(),
        };
        let facts = PaymentFacts::of(&payment, UnixMillis(42), ResponseSchema::V1);
        let back = PaymentFacts::decode(&facts.encode()).unwrap();
        assert_eq!(back, facts);
        let rebuilt = back.payment().unwrap();
        assert_eq!(rebuilt.id, payment.id);
        assert_eq!(rebuilt.amount, payment.amount);
        assert_eq!(rebuilt.merchant_reference, payment.merchant_reference);
    }
}
