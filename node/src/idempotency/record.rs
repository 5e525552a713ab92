//! The idempotency record (DESIGN §4): who owns a key, what the first command
//! meant, how far its execution got, and what to replay.

use std::fmt;
use std::str::FromStr;

use crate::domain::{IdempotencyKey, PaymentId, PrincipalId, TenantId, UnixMillis};

/// The scope a key is unique in. The tenant and principal come from the
/// credential: two callers can never see each other's records, even when
/// they pick the same key (I7). See docs/ARCHITECTURE.md for why the
/// principal is part of the scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    pub tenant: TenantId,
    pub principal: PrincipalId,
    pub operation: &'static str,
    pub key: IdempotencyKey,
}

/// The operation of `POST /payments`.
pub const CREATE_PAYMENT: &str = "payments.create";

/// The operations this build claims keys for.
const OPERATIONS: [&str; 1] = [CREATE_PAYMENT];

/// The operations this build knows, so names read back from storage become
/// the same `&'static str` the code claims with.
pub fn known_operation(name: &str) -> Option<&'static str> {
    OPERATIONS.into_iter().find(|op| *op == name)
}

macro_rules! str_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $s:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $s),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($s => Ok(Self::$variant),)+
                    other => Err(format!("unknown {} {other:?}", stringify!($name))),
                }
            }
        }
    };
}

str_enum!(
    /// Where the operation stands.
    Status {
        InProgress => "IN_PROGRESS",
        Completed => "COMPLETED",
        FailedReplayable => "FAILED_REPLAYABLE",
        FailedRetryable => "FAILED_RETRYABLE",
        UnknownRequiresRecovery => "UNKNOWN_REQUIRES_RECOVERY",
        Expired => "EXPIRED",
    }
);

str_enum!(
    /// The last recovery point reached; a takeover resumes from here.
    Step {
        Received => "RECEIVED",
        LocalPaymentCreated => "LOCAL_PAYMENT_CREATED",
        ProviderRequestSent => "PROVIDER_REQUEST_SENT",
        ProviderConfirmed => "PROVIDER_CONFIRMED",
        Completed => "COMPLETED",
    }
);

impl Status {
    /// Finished records whose stored answer is replayed verbatim.
    pub fn is_replayable(self) -> bool {
        matches!(self, Self::Completed | Self::FailedReplayable)
    }

    /// Records that may reach the end of their replay window. Unfinished
    /// records never expire: expiring one would let an uncertain operation
    /// run a second time.
    pub fn can_expire(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::FailedReplayable | Self::FailedRetryable
        )
    }
}

/// A response as it was first sent, kept to be replayed byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    /// Semantic headers only (`Location`, `Content-Type`), in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The response schema the body was rendered with.
    pub schema_version: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub scope: Scope,
    pub fingerprint_version: i32,
    pub fingerprint: String,
    pub status: Status,
    pub step: Step,
    /// Bumped by every takeover; every owner write must present it (I6).
    pub fence: i64,
    pub locked_until: UnixMillis,
    pub payment_id: Option<PaymentId>,
    pub provider_key: Option<String>,
    /// Present when `status.is_replayable()`, until the record expires.
    pub response: Option<StoredResponse>,
    pub error_code: Option<String>,
    pub trace_id: Option<String>,
    pub region: String,
    pub takeovers: i32,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
    pub expires_at: Option<UnixMillis>,
}

impl Record {
    /// Past its replay window, whether or not the sweeper got to it yet.
    pub fn is_expired(&self, now: UnixMillis) -> bool {
        self.status == Status::Expired
            || (self.status.can_expire() && self.expires_at.is_some_and(|at| at <= now))
    }

    pub fn lease_expired(&self, now: UnixMillis) -> bool {
        self.locked_until <= now
    }
}
