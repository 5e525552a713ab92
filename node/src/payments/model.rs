//! The payment as the regional database keeps it.

use crate::domain::{Money, PaymentId, TenantId, UnixMillis};
use crate::payments::command::Channel;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentStatus {
    /// Created locally; the provider has not confirmed anything yet.
    Pending,
    Succeeded,
    Declined,
}

impl PaymentStatus {
    pub const ALL: [PaymentStatus; 3] = [Self::Pending, Self::Succeeded, Self::Declined];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Succeeded => "succeeded",
            Self::Declined => "declined",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(Self::Pending),
            "succeeded" => Some(Self::Succeeded),
            "declined" => Some(Self::Declined),
            _ => None,
        }
    }
}

/// A payment about to be created by a claim.
#[derive(Debug, Clone)]
pub struct NewPayment {
    pub id: PaymentId,
    pub tenant: TenantId,
    pub account_id: String,
    pub merchant_reference: String,
    pub amount: Money,
    pub channel: Channel,
    pub region: String,
}

/// The provider's verdict, applied in the finishing transaction.
#[derive(Debug, Clone)]
pub struct PaymentUpdate {
    pub id: PaymentId,
    pub status: PaymentStatus,
    pub provider_charge_id: Option<String>,
    pub decline_code: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Payment {
    pub id: PaymentId,
    pub tenant: TenantId,
    pub account_id: String,
    pub merchant_reference: String,
    pub amount: Money,
    pub channel: Channel,
    pub status: PaymentStatus,
    pub provider_charge_id: Option<String>,
    pub decline_code: Option<String>,
    pub region: String,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
}

/// The facts a run needs, rebuilt from a stored payment (recovery, operators).
impl From<Payment> for NewPayment {
    fn from(p: Payment) -> Self {
        Self {
            id: p.id,
            tenant: p.tenant,
            account_id: p.account_id,
            merchant_reference: p.merchant_reference,
            amount: p.amount,
            channel: p.channel,
            region: p.region,
        }
    }
}

/// A row for the outbox, written in the same transaction as the payment's
/// final state (DESIGN §7).
#[derive(Debug, Clone)]
pub struct OutboxEvent {
    pub event_id: String,
    pub event_type: &'static str,
    pub schema_version: i32,
    pub aggregate_id: String,
    pub tenant: TenantId,
    pub payload: String,
    /// The W3C `traceparent` of the span that wrote the event; the publisher
    /// sends it as a message header so consumers join the same trace.
    pub traceparent: Option<String>,
}

/// Which of a tenant's payments a listing wants; conditions combine with
/// AND, and both are exact matches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PaymentFilter {
    pub account_id: Option<String>,
    pub merchant_reference: Option<String>,
}

/// A payment's place in a listing's order, creation order: `(created_at,
/// id)` ascending. A page resumes strictly after the position it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPosition {
    pub created_at: UnixMillis,
    pub id: PaymentId,
}

/// Cuts `items`, fetched with one more than `limit`, to the page; whether
/// that extra one showed a next page follows. Both store modes fetch a page
/// this way.
pub fn cut_page<T>(items: &mut Vec<T>, limit: u32) -> bool {
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    more
}

/// One page of a listing, and where the next one starts (`None`: this was
/// the last page).
#[derive(Debug, Clone)]
pub struct PaymentPage {
    pub payments: Vec<Payment>,
    pub next: Option<ListPosition>,
}
