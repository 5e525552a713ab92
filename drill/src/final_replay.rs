//! The drill's last traffic: once the fault is over (healed, and failed
//! back when asked), every operation whose final answer was a stored answer
//! — `201`, `402`, `409 DUPLICATE_MERCHANT_REFERENCE` — is sent once more
//! with its key and exact bytes.
//!
//! The load's own replays follow their acknowledgement closely, so most of
//! them land before the fault; these land after it, through whichever
//! region serves the tenant now, so I2 is proven across the failover (and
//! the failback) for every answer the service stored. They are ordinary
//! logged operations ([`Intent::Replay`]): the faithful-replay check holds
//! each to the first answer, status and body byte for byte, with
//! `Idempotent-Replayed: true`.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client_log::{ClientLog, Intent};
use crate::cluster::Tenant;
use crate::load::{OperationFactory, PaymentClient};

/// Replays in flight at once: enough to finish in seconds, few enough not
/// to turn the check into a load test of its own.
const IN_FLIGHT: usize = 8;

/// What the final phase sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinalReplays {
    pub sent: usize,
    /// Replays that got a final answer before `deadline`.
    pub answered: usize,
}

impl FinalReplays {
    /// One line for the timeline.
    pub fn summary(&self) -> String {
        format!(
            "final replays: {} stored answers asked for again, {} answered",
            self.sent, self.answered
        )
    }
}

/// Sends every operation of `log` with a stored final answer once more (not
/// the replays themselves: their key is their original's), retrying each
/// until a final answer or `deadline`.
pub async fn replay_stored_answers(
    log: &ClientLog,
    tenants: &[Tenant],
    client: &PaymentClient,
    factory: &Arc<OperationFactory>,
    deadline: Instant,
) -> FinalReplays {
    let api_keys: BTreeMap<&str, &str> = tenants
        .iter()
        .map(|t| (t.id.as_str(), t.api_key.as_str()))
        .collect();
    let originals = log.operations.iter().filter(|op| {
        // A replay or a same-body resend shares its original's key: the
        // original's final replay asks for that answer again — unless the
        // original never got one and the resend did.
        let asked_by_original = match op.intent {
            Intent::Replay { .. } => true,
            Intent::Resend { of, .. } => log.final_answer(of).is_some_and(|a| a.is_stored_answer()),
            _ => false,
        };
        !asked_by_original
            && log
                .final_answer(op.id)
                .is_some_and(|a| a.is_stored_answer())
    });
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut replays = JoinSet::new();
    for op in originals {
        let Some(api_key) = api_keys.get(op.tenant.as_str()) else {
            continue;
        };
        let replay = factory.replay(op);
        let (client, api_key, in_flight) =
            (client.clone(), (*api_key).to_owned(), in_flight.clone());
        replays.spawn(async move {
            let _permit = in_flight.acquire_owned().await.ok()?;
            client.send(&replay, &api_key, deadline).await
        });
    }
    let mut result = FinalReplays {
        sent: replays.len(),
        answered: 0,
    };
    while let Some(answer) = replays.join_next().await {
        if answer.ok().flatten().is_some() {
            result.answered += 1;
        }
    }
    result
}
