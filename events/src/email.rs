//! Receipt emails, in two steps so that sending never happens inside a
//! consumer's transaction:
//!
//! 1. [`ReceiptEmailConsumer`]: on `payment.succeeded`, inserts an
//!    `email_notifications` row whose unique `dedupe_key` is
//!    `receipt_payment_<payment id>` (with the inbox row, one transaction);
//! 2. [`EmailSenderWorker`]: reads `PENDING` rows, sends each through the
//!    [`EmailSender`] with the dedupe key as idempotency token, then marks
//!    the round's rows `SENT` in one write. A crash between the two sends the
//!    same rows again — under the
//!    same token, which the email service dedupes — never under a new one.
//!
//! Several replicas may send the same pending row at once; that too is the
//! same token twice, so no row lock is held across the send.

use std::sync::Arc;
use std::time::Duration;

use once_db::Database;
use once_domain::{Clock, UnixMillis};
use once_failpoints::crash_point;
use sqlx::Row;
use tokio::sync::watch;
use tracing::{instrument, warn};

use crate::consumer::{ConsumeError, Consumer};
use crate::effect::Effect;
use crate::email_sender::{Email, EmailSender};
use crate::message::{EventMessage, PAYMENT_SUCCEEDED};
use crate::metrics::EventMetrics;
use crate::outbox::error_chain;
use crate::placeholders;

pub const NAME: &str = "receipt-email";
pub const PENDING: &str = "PENDING";
pub const SENT: &str = "SENT";

/// A round of the sender: the oldest pending notifications, read through
/// the partial index on pending rows (`PENDING` spelled out, not bound: see
/// [`once_db::RoundQuery`]).
pub const SELECT_PENDING: &str = "SELECT seq, dedupe_key, recipient, subject, body FROM email_notifications \
     WHERE status = 'PENDING' ORDER BY seq LIMIT 64";

/// The notification's unique key, also the email's idempotency token.
pub fn dedupe_key(payment_id: &str) -> String {
    format!("receipt_payment_{payment_id}")
}

#[derive(Debug, Default, Clone, Copy)]
pub struct ReceiptEmailConsumer;

impl Consumer for ReceiptEmailConsumer {
    fn name(&self) -> &str {
        NAME
    }

    fn handles(&self, event_type: &str) -> bool {
        event_type == PAYMENT_SUCCEEDED
    }

    fn effect(&self, messages: &[EventMessage], now: UnixMillis) -> Result<Effect, ConsumeError> {
        let mut effect = Effect::new(
            "email_notifications",
            &[
                "dedupe_key",
                "payment_id",
                "tenant_id",
                "recipient",
                "subject",
                "body",
                "status",
                "created_at",
            ],
            "(dedupe_key)",
        );
        for message in messages {
            let payment = message.payment()?;
            // The payment carries no address: the email service resolves
            // the account to its owner's address.
            let recipient = format!("account:{}/{}", payment.tenant_id, payment.account_id);
            let subject = format!("Your payment of {} {}", payment.amount, payment.currency);
            let body = format!(
                "Payment {} of {} {} for order {} succeeded.",
                payment.payment_id, payment.amount, payment.currency, payment.merchant_reference
            );
            effect.row(
                &message.event_id,
                vec![
                    dedupe_key(&payment.payment_id).into(),
                    payment.payment_id.into(),
                    payment.tenant_id.into(),
                    recipient.into(),
                    subject.into(),
                    body.into(),
                    PENDING.into(),
                    now.0.into(),
                ],
            );
        }
        Ok(effect)
    }
}

/// A round of the sender that could not read or mark its notifications;
/// the next round tries again (a sent row not marked is sent again under
/// the same token).
#[derive(Debug, thiserror::Error)]
pub enum SendRoundError {
    #[error("email notifications query failed")]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    NotCommitted(#[from] once_db::BatchFailed),
}

/// Marks a round's sent notifications `SENT` (one statement) and counts an
/// attempt with its error on each that failed.
async fn mark_round(
    conn: &mut sqlx::AnyConnection,
    sent: &[i64],
    failed: &[(i64, String)],
    now: UnixMillis,
) -> Result<(), SendRoundError> {
    if !sent.is_empty() {
        let sql = format!(
            "UPDATE email_notifications SET status = $1, sent_at = $2, attempts = attempts + 1 \
             WHERE status = '{PENDING}' AND seq IN ({})",
            placeholders::list(3, sent.len())
        );
        let mut query = sqlx::query(&sql).bind(SENT).bind(now.0);
        for seq in sent {
            query = query.bind(*seq);
        }
        query.execute(&mut *conn).await?;
    }
    for (seq, error) in failed {
        sqlx::query(
            "UPDATE email_notifications SET attempts = attempts + 1, last_error = $1 WHERE seq = $2",
        )
        .bind(error)
        .bind(*seq)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
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

    /// Sends up to 64 pending notifications, oldest first, then marks the
    /// round's outcomes in one write (a job of the database's group commit,
    /// so it shares a commit with the request path's writes rather than
    /// paying one per email). Returns how many were sent.
    #[instrument(name = "send pending receipt emails", skip_all)]
    pub async fn send_pending(&self) -> Result<usize, SendRoundError> {
        let rows = sqlx::query(SELECT_PENDING).fetch_all(&self.db.pool).await?;
        let mut sent = Vec::with_capacity(rows.len());
        let mut failed = Vec::new();
        for row in rows {
            let seq: i64 = row.try_get("seq")?;
            let token: String = row.try_get("dedupe_key")?;
            let email = Email {
                to: row.try_get("recipient")?,
                subject: row.try_get("subject")?,
                body: row.try_get("body")?,
            };
            match self.sender.send(&token, &email).await {
                Ok(()) => sent.push(seq),
                Err(e) => {
                    self.metrics.email_send_failures.inc();
                    warn!(token = %token, error = %error_chain(&e), "sending an email failed; will retry");
                    failed.push((seq, error_chain(&e)));
                }
            }
        }
        if sent.is_empty() && failed.is_empty() {
            return Ok(0);
        }
        if !sent.is_empty() {
            // The crash the sender must survive: sent, not marked.
            crash_point("after_email_send");
        }
        let (count, now) = (sent.len(), self.clock.now());
        self.db
            .batches()
            .run(Box::new(move |conn| {
                Box::pin(async move { mark_round(conn, &sent, &failed, now).await })
            }))
            .await?;
        self.metrics.emails_sent.inc_by(count as u64);
        Ok(count)
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
