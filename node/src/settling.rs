//! The settling pass: payment rows left pending behind a finished record
//! get their final state and event (docs/decisions/0053-settling-rows-behind-their-records.md).
//!
//! In the `raft` store mode a finish is two writes: raft-store completes
//! the record, then the regional database takes the payment's state and
//! its outbox event. A crash (or a database outage outlasting the finish's
//! retries) between them leaves a pending row, and no event, behind a
//! record every retry replays as final. The recovery worker runs this pass
//! after each of its own: it reads pending rows older than a lease against
//! their records (`Recovery::unsettled`), asks the provider by key for the
//! charge the record finished with — the record keeps the answer, not the
//! charge id — and writes what the finish would have written
//! (`Recovery::settle`), once: a row no longer pending takes nothing.
//!
//! The provider and the record must agree (approved and completed, declined
//! and failed): if they do not, or the provider has no charge under the
//! key, the row is left pending and the disagreement logged for an
//! operator, never guessed at. In the `sql` mode record and row commit
//! together and the pass finds nothing.

use tracing::{error, info, warn};

use crate::engine::execute::final_state;
use crate::idempotency::record::Status;
use crate::payments::model::{ListPosition, NewPayment};
use crate::provider::ChargeOutcome;
use crate::state::AppState;
use crate::store::Unsettled;

/// How many pending rows one pass reads.
const BATCH: i64 = 100;

/// One pass over the pending rows from `cursor` on; moves the cursor (back
/// to the oldest once it reached the newest). Returns how many rows it
/// settled.
pub async fn settle_due(
    state: &AppState,
    cursor: &mut Option<ListPosition>,
) -> anyhow::Result<usize> {
    // Younger rows may still be in their finish: a finish runs within its
    // owner's lease.
    let before = state.clock.now().minus(state.config.lease);
    let page = state
        .store
        .recovery
        .unsettled(before, cursor.as_ref(), BATCH)
        .await?;
    *cursor = page.next;
    let mut settled = 0;
    for unsettled in &page.rows {
        match settle(state, unsettled).await {
            Ok(true) => settled += 1,
            Ok(false) => {}
            Err(e) => warn!(
                payment_id = %unsettled.payment.id,
                error = %format!("{e:#}"),
                "settling a payment left pending failed; will retry"
            ),
        }
    }
    Ok(settled)
}

/// Settles one row from the provider's answer; `false` when it must wait
/// for an operator.
async fn settle(state: &AppState, unsettled: &Unsettled) -> anyhow::Result<bool> {
    let Unsettled { payment, record } = unsettled;
    let provider_key = record
        .provider_key
        .clone()
        .unwrap_or_else(|| payment.id.provider_key());
    let outcome = state.provider.lookup(&provider_key).await?;
    let agrees = match (&outcome, record.status) {
        (Some(ChargeOutcome::Approved { .. }), Status::Completed) => true,
        (Some(ChargeOutcome::Declined { .. }), Status::FailedReplayable) => true,
        // An expired record keeps its error code, not its answer.
        (Some(ChargeOutcome::Approved { .. }), Status::Expired) => record.error_code.is_none(),
        (Some(ChargeOutcome::Declined { .. }), Status::Expired) => record.error_code.is_some(),
        _ => false,
    };
    let Some(outcome) = outcome.clone().filter(|_| agrees) else {
        error!(
            payment_id = %payment.id,
            record_status = record.status.as_str(),
            provider = ?outcome,
            "a payment left pending behind a finished record, and the provider does not confirm how it finished: left for an operator"
        );
        return Ok(false);
    };
    let facts = NewPayment::from(payment.clone());
    // Only the row's state and the event are written here; the record
    // keeps the answer it was finished with.
    let (finish, _) = final_state(
        state,
        &payment.id,
        &facts,
        payment.created_at,
        outcome,
        state.config.response_schema,
    );
    state.store.recovery.settle(unsettled, &finish).await?;
    state.metrics.settled_late.inc();
    info!(payment_id = %payment.id, region = %record.region, "settled a payment left pending behind its finished record");
    Ok(true)
}
