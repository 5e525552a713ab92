//! Receipt emails, in two steps so that sending never happens inside a
//! consumer's transaction:
//!
//! 1. [`ReceiptEmailConsumer`]: on `payment.succeeded`, inserts an
//!    `email_notifications` row whose unique `dedupe_key` is
//!    `receipt_payment_<payment id>` (with the inbox row, one transaction);
//! 2. [`EmailSenderWorker`]: reads `PENDING` rows, sends each through the
//!    [`EmailSender`] with the dedupe key as idempotency token, then marks it
//!    `SENT`. A crash between the two sends the same row again — under the
//!    same token, which the email service dedupes — never under a new one.
//!
//! Several replicas may send the same pending row at once; that too is the
//! same token twice, so no row lock is held across the send.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use once_db::Database;
use once_domain::{Clock, UnixMillis};
use once_failpoints::crash_point;
use sqlx::Row;
use tokio::sync::watch;
use tracing::{instrument, warn};

use crate::consumer::{ConsumeError, Consumer};
use crate::email_sender::{Email, EmailSender};
use crate::message::{EventMessage, PAYMENT_SUCCEEDED};
use crate::metrics::EventMetrics;
use crate::outbox::error_chain;

pub const NAME: &str = "receipt-email";
pub const PENDING: &str = "PENDING";
pub const SENT: &str = "SENT";

/// The notification's unique key, also the email's idempotency token.
pub fn dedupe_key(payment_id: &str) -> String {
    format!("receipt_payment_{payment_id}")
}

#[derive(Debug, Default, Clone, Copy)]
pub struct ReceiptEmailConsumer;

#[async_trait]
impl Consumer for ReceiptEmailConsumer {
    fn name(&self) -> &str {
        NAME
    }

    fn handles(&self, event_type: &str) -> bool {
        event_type == PAYMENT_SUCCEEDED
    }

    async fn apply(
        &self,
        tx: &mut sqlx::AnyConnection,
        message: &EventMessage,
        now: UnixMillis,
    ) -> Result<(), ConsumeError> {
        let payment = message.payment()?;
        // The payment carries no address: the email service resolves the
        // account to its owner's address.
        let recipient = format!("account:{}/{}", payment.tenant_id, payment.account_id);
        let subject = format!("Your payment of {} {}", payment.amount, payment.currency);
        let body = format!(
            "Payment {} of {} {} for order {} succeeded.",
            payment.payment_id, payment.amount, payment.currency, payment.merchant_reference
        );
        sqlx::query(
            "INSERT INTO email_notifications (dedupe_key, payment_id, tenant_id, recipient, subject, body, status, attempts, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8) ON CONFLICT (dedupe_key) DO NOTHING",
        )
        .bind(dedupe_key(&payment.payment_id))
        .bind(&payment.payment_id)
        .bind(&payment.tenant_id)
        .bind(&recipient)
        .bind(&subject)
        .bind(&body)
        .bind(PENDING)
        .bind(now.0)
        .execute(&mut *tx)
        .await?;
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct EmailSenderWorker {
    db: Database,
    sender: Arc<dyn EmailSender>,
    clock: Arc<dyn Clock>,
    metrics: EventMetrics,
}

impl EmailSenderWorker {
    pub fn new(
        db: Database,
        sender: Arc<dyn EmailSender>,
        clock: Arc<dyn Clock>,
        metrics: EventMetrics,
    ) -> Self {
        Self {
            db,
            sender,
            clock,
            metrics,
        }
    }

    /// Sends up to 64 pending notifications, oldest first. Returns how many
    /// were sent.
    #[instrument(name = "send pending receipt emails", skip_all)]
    pub async fn send_pending(&self) -> Result<usize, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT seq, dedupe_key, recipient, subject, body FROM email_notifications \
             WHERE status = $1 ORDER BY seq LIMIT 64",
        )
        .bind(PENDING)
        .fetch_all(&self.db.pool)
        .await?;
        let mut sent = 0;
        for row in rows {
            let seq: i64 = row.try_get("seq")?;
            let token: String = row.try_get("dedupe_key")?;
            let email = Email {
                to: row.try_get("recipient")?,
                subject: row.try_get("subject")?,
                body: row.try_get("body")?,
            };
            match self.sender.send(&token, &email).await {
                Ok(()) => {
                    // The crash the sender must survive: sent, not marked.
                    crash_point("after_email_send");
                    sqlx::query(
                        "UPDATE email_notifications SET status = $1, sent_at = $2, attempts = attempts + 1 \
                         WHERE seq = $3 AND status = $4",
                    )
                    .bind(SENT)
                    .bind(self.clock.now().0)
                    .bind(seq)
                    .bind(PENDING)
                    .execute(&self.db.pool)
                    .await?;
                    self.metrics.emails_sent.inc();
                    sent += 1;
                }
                Err(e) => {
                    self.metrics.email_send_failures.inc();
                    warn!(token = %token, error = %error_chain(&e), "sending an email failed; will retry");
                    sqlx::query(
                        "UPDATE email_notifications SET attempts = attempts + 1, last_error = $1 WHERE seq = $2",
                    )
                    .bind(error_chain(&e))
                    .bind(seq)
                    .execute(&self.db.pool)
                    .await?;
                }
            }
        }
        Ok(sent)
    }

    /// Sends until `shutdown` flips: again at once after a full batch,
    /// otherwise every `interval`.
    pub async fn run(self, interval: Duration, mut shutdown: watch::Receiver<bool>) {
        loop {
            let sent = match self.send_pending().await {
                Ok(n) => n,
                Err(e) => {
                    warn!(error = %error_chain(&e), "reading pending emails failed; will retry");
                    0
                }
            };
            if *shutdown.borrow() {
                return;
            }
            if sent >= 64 {
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}
