//! Finishes written after their answer (decision 0054): in the `raft` mode
//! a new payment is answered once the provider has, and its finish (the
//! record in raft-store, then the row and event) is written by a task of
//! its own. This owns those tasks and what they are writing.
//!
//! - Shutdown waits for them ([`Finishing::close_and_wait`]); one cut off is
//!   recovered after its lease, with the same answer.
//! - While one is being written, this node's `GET /payments/{id}` and
//!   `GET /payments` answer the payment as the client was told
//!   ([`Finishing::payment`]), not as the row or record still pending
//!   shows it. Other nodes read the row or the record, which follow within
//!   the finish's one consensus write.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::task::TaskTracker;

use crate::domain::{PaymentId, TenantId};
use crate::payments::model::Payment;

#[derive(Debug, Default, Clone)]
pub struct Finishing {
    tasks: TaskTracker,
    payments: Arc<Mutex<HashMap<PaymentId, Payment>>>,
}

impl Finishing {
    /// Runs `finish` for `payment` (as answered) in a task of its own.
    pub fn spawn(&self, payment: Payment, finish: impl Future<Output = ()> + Send + 'static) {
        let id = payment.id.clone();
        self.lock().insert(id.clone(), payment);
        let payments = self.payments.clone();
        self.tasks.spawn(async move {
            finish.await;
            payments
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        });
    }

    /// The payment as answered, while its finish is being written here.
    /// Another tenant's id reads as absent (I7).
    pub fn payment(&self, tenant: &TenantId, id: &PaymentId) -> Option<Payment> {
        self.lock().get(id).filter(|p| &p.tenant == tenant).cloned()
    }

    /// Takes no more, and waits up to `limit` for those being written; how
    /// many were still being written at the limit.
    pub async fn close_and_wait(&self, limit: Duration) -> usize {
        self.tasks.close();
        match tokio::time::timeout(limit, self.tasks.wait()).await {
            Ok(()) => 0,
            Err(_) => self.tasks.len(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PaymentId, Payment>> {
        self.payments.lock().unwrap_or_else(|p| p.into_inner())
    }
}
