//! An operator's verdict on an operation whose provider outcome stayed
//! unknown (decision 0022): take the record over, then finish it as
//! charged (the answer a successful charge would have given, replayed to
//! every retry; nothing is charged) or as not charged (retryable under the
//! same key), with an audit entry (who, when, why) in the same write.
//! `POST /admin/records/{tenant}/{principal}/{key}/resolve` is the HTTP
//! face ([`crate::admin`]).

use std::time::Duration;

use super::execute::final_state;
use crate::idempotency::{Record, Scope, Status};
use crate::payments::model::NewPayment;
use crate::provider::ChargeOutcome;
use crate::state::AppState;
use crate::store::{Finish, Resolution, ResolvedOutcome, StoreError};

/// What the operator decided, and who and why, for the audit trail.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub outcome: ResolvedOutcome,
    pub reason: String,
    pub actor: String,
}

impl Verdict {
    /// Refuses a verdict the audit trail could not account for.
    pub fn new(
        outcome: ResolvedOutcome,
        reason: String,
        actor: String,
    ) -> Result<Self, ResolveError> {
        if reason.trim().is_empty() || actor.trim().is_empty() {
            return Err(ResolveError::MissingAudit);
        }
        Ok(Self {
            outcome,
            reason,
            actor,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("reason and actor are required: the audit trail needs both")]
    MissingAudit,
    #[error("no record for this scope")]
    NotFound,
    #[error(
        "record is {0} and not awaiting resolution (only UNKNOWN_REQUIRES_RECOVERY or an abandoned IN_PROGRESS)"
    )]
    NotAwaiting(Status),
    /// Another owner (a retry, the recovery worker, another operator) took
    /// the record first; nothing was written.
    #[error("the record has another owner: try again later")]
    Busy { retry_after: Duration },
    #[error("the operation never created a payment: it cannot have charged")]
    NoPayment,
    #[error("the operation's payment row does not exist: it cannot have charged")]
    PaymentMissing,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Resolves the operation under `scope` as `verdict` says, and returns its
/// record as it stands afterwards.
pub async fn resolve_unknown(
    state: &AppState,
    scope: &Scope,
    verdict: Verdict,
) -> Result<Record, ResolveError> {
    let busy = ResolveError::Busy {
        retry_after: state.config.lease,
    };
    let now = state.clock.now();
    let seen = state
        .store
        .requests
        .load(scope)
        .await?
        .ok_or(ResolveError::NotFound)?;
    if seen.status == Status::InProgress && !seen.lease_expired(now) && seen.takeovers > 0 {
        // It was stuck, and a recovery pass (or a retry) holds it now: it
        // is left unknown again or finished within the lease. Busy, so the
        // operator tries again, not refused as a first attempt is.
        return Err(busy);
    }
    let awaiting = seen.status == Status::UnknownRequiresRecovery
        || (seen.status == Status::InProgress && seen.lease_expired(now));
    if !awaiting {
        return Err(ResolveError::NotAwaiting(seen.status));
    }
    let owner = state
        .store
        .recovery
        .take_over(&seen, now, state.config.lease)
        .await?
        .ok_or(busy)?
        .record;
    let audit = Resolution {
        outcome: verdict.outcome,
        reason: verdict.reason,
        actor: verdict.actor,
        at: now,
        expires_at: now.plus(state.config.replay_window),
    };
    let finish = match verdict.outcome {
        ResolvedOutcome::NotCharged => None,
        ResolvedOutcome::Charged => Some(charged(state, scope, &owner).await?),
    };
    match state
        .store
        .operators
        .resolve(&owner, finish.as_ref(), &audit)
        .await
    {
        Ok(()) => {}
        Err(StoreError::Fenced) => {
            return Err(ResolveError::Busy {
                retry_after: state.config.lease,
            });
        }
        Err(e) => return Err(e.into()),
    }
    tracing::warn!(tenant = %scope.tenant, key = %scope.key, outcome = audit.outcome.as_str(), actor = %audit.actor, "operation resolved by hand");
    state
        .store
        .requests
        .load(scope)
        .await?
        .ok_or(ResolveError::NotFound)
}

/// The finish a charge would have written, its charge id naming the
/// operator as its source.
async fn charged(state: &AppState, scope: &Scope, owner: &Record) -> Result<Finish, ResolveError> {
    let payment_id = owner.payment_id.clone().ok_or(ResolveError::NoPayment)?;
    let payment = state
        .store
        .payments
        .payment(&scope.tenant, &payment_id)
        .await?
        .ok_or(ResolveError::PaymentMissing)?;
    let facts = NewPayment::from(payment);
    let charge_id = format!(
        "manual:{}",
        owner
            .provider_key
            .clone()
            .unwrap_or_else(|| payment_id.provider_key())
    );
    let (finish, _) = final_state(
        state,
        &payment_id,
        &facts,
        owner.created_at,
        ChargeOutcome::Approved { charge_id },
        // Nobody was answered: the provider's outcome was unknown.
        state.config.response_schema,
    );
    Ok(finish)
}
