//! Consumers and the runner that feeds them.
//!
//! A [`Consumer`] only says which events it wants and how to write its
//! effect inside a transaction. The [`ConsumerRunner`] owns the protocol
//! that makes that effect happen once:
//!
//! 1. insert the inbox row `(consumer, event id)` — if it is there already,
//!    this is a duplicate: write nothing and acknowledge;
//! 2. write the effect (itself behind a unique key);
//! 3. commit, then acknowledge. A crash between commit and ack means a
//!    redelivery, which step 1 turns into a no-op.
//!
//! Deliveries that arrive together are handled as a batch: steps 1–2 for
//! all of them are one job of the database's group commit (its own
//! savepoint in a batch shared with the request path's writes, decision
//! 0037): one multi-row inbox statement, then the effects of the messages it
//! found new, in one statement per consumer. Step 3 is the group commit's
//! commit. A batch whose effects are refused is rolled back and its messages
//! handled one at a time, so a bad message fails alone.
//!
//! A failed attempt rolls back (no inbox row, no effect) and asks the broker
//! to redeliver after a backoff. After `max_attempts` deliveries — or at once
//! for a message no attempt can process (an undecodable body, an unknown
//! schema version) — it is parked in `dead_letters` together with an inbox
//! row `DEAD_LETTERED`, in one transaction, and acknowledged so the messages
//! behind it keep flowing. Errors reaching the database itself (connection
//! lost, pool exhausted) never count towards dead-lettering: the message is
//! fine, the node is not.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, join_all};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use once_db::Database;
use once_domain::{Clock, UnixMillis};
use once_failpoints::crash_point;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tracing::{Instrument, debug, info, info_span, instrument, warn};

use crate::broker::{Broker, BrokerError, Delivery, Subscription};
use crate::config::EventsConfig;
use crate::dead_letters::{self, DeadLetter};
use crate::effect::Effect;
use crate::inbox;
use crate::message::{EventMessage, MessageError};
use crate::metrics::{ConsumerName, EventMetrics};
use crate::outbox::error_chain;

/// Most deliveries one consumer handles as one batch.
const BATCH: usize = 64;

/// The batches a consumer's run loop has started and not yet finished.
type InFlight<'a> = FuturesUnordered<BoxFuture<'a, ()>>;

/// Batches one consumer handles at the same time; more than one only while
/// a whole [`BATCH`] waits behind those in flight (decision 0051).
const IN_FLIGHT: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum ConsumeError {
    /// No attempt can succeed: dead-letter now.
    #[error("unprocessable message")]
    Poison(#[from] MessageError),
    /// The effect was refused (by the consumer or a database constraint);
    /// retried, then dead-lettered.
    #[error("effect failed: {0}")]
    Effect(String),
    /// The database could not be reached, or the batch the effect was
    /// written in did not commit: retried without limit.
    #[error("database unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl From<once_db::BatchFailed> for ConsumeError {
    fn from(e: once_db::BatchFailed) -> Self {
        Self::Unavailable(e.into())
    }
}

impl From<sqlx::Error> for ConsumeError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            // The database answered and said no: a property of the message.
            sqlx::Error::Database(db) => Self::Effect(db.to_string()),
            other => Self::Unavailable(other.into()),
        }
    }
}

impl ConsumeError {
    /// The stable code stored with a dead letter.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Poison(_) => "UNPROCESSABLE_MESSAGE",
            Self::Effect(_) => "EFFECT_FAILED",
            Self::Unavailable(_) => "DATABASE_UNAVAILABLE",
        }
    }
}

/// One consumer: which events it wants and the effect it writes.
pub trait Consumer: Send + Sync + std::fmt::Debug + 'static {
    /// Its name in `consumer_inbox`, `dead_letters` and the broker (a
    /// JetStream durable name: no dots or spaces).
    fn name(&self) -> &str;

    /// Events of other types are acknowledged untouched.
    fn handles(&self, event_type: &str) -> bool;

    /// The effect of `messages` (one or more, each of an event this
    /// consumer handles): a row per message, behind the table's unique key.
    /// The runner writes the rows of the messages new to the inbox, with
    /// their inbox rows, in one query ([`Effect`]). An error refuses them
    /// all (so does the database refusing a row); the runner then writes the
    /// messages one at a time, so that a bad one fails alone.
    fn effect(&self, messages: &[EventMessage], now: UnixMillis) -> Result<Effect, ConsumeError>;
}

/// What became of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The effect was written now.
    Processed,
    /// The inbox already had the message: nothing written.
    Duplicate,
    /// Not an event this consumer handles.
    Ignored,
}

#[derive(Debug, Clone)]
pub struct ConsumerRunner {
    consumer: Arc<dyn Consumer>,
    db: Database,
    broker: Arc<dyn Broker>,
    clock: Arc<dyn Clock>,
    metrics: EventMetrics,
    max_attempts: u32,
    backoff: Duration,
}

impl ConsumerRunner {
    pub fn new(
        consumer: Arc<dyn Consumer>,
        db: Database,
        broker: Arc<dyn Broker>,
        clock: Arc<dyn Clock>,
        metrics: EventMetrics,
        config: &EventsConfig,
    ) -> Self {
        Self {
            consumer,
            db,
            broker,
            clock,
            metrics,
            max_attempts: config.max_attempts,
            backoff: config.retry_backoff,
        }
    }

    pub fn name(&self) -> &str {
        self.consumer.name()
    }

    /// One message: [`ConsumerRunner::process_batch`] of one. Public so
    /// tests can race it directly, without a broker in between.
    pub async fn process(&self, message: &EventMessage) -> Result<Outcome, ConsumeError> {
        let outcomes = self.process_batch(std::slice::from_ref(message)).await?;
        Ok(outcomes[0])
    }

    /// Inbox rows and effects of `messages` in one job of the database's
    /// group commit, one query ([`Effect::write_with_inbox`]): the effects
    /// of the messages new to the inbox, and their inbox rows. So a batch
    /// costs one trip to the database, not one per message or per table,
    /// and shares its commit with the request path's writes. A refused
    /// effect fails the whole job (rolled back to its savepoint, nothing
    /// written); [`ConsumerRunner::handle_batch`]
    /// then handles the messages one by one. The outcomes are in the order
    /// of `messages`; a message given twice is processed once.
    pub async fn process_batch(
        &self,
        messages: &[EventMessage],
    ) -> Result<Vec<Outcome>, ConsumeError> {
        // Copied only when some are for other consumers (the effect is built
        // from references; the job owns the effect, not the messages).
        let handles = |m: &EventMessage| self.consumer.handles(&m.event_type);
        let handled: Cow<'_, [EventMessage]> = if messages.iter().all(handles) {
            Cow::Borrowed(messages)
        } else {
            Cow::Owned(messages.iter().filter(|m| handles(m)).cloned().collect())
        };
        let mut processed = HashSet::new();
        if !handled.is_empty() {
            let now = self.clock.now();
            let effect = self.consumer.effect(&handled, now)?;
            let (consumer, dialect) = (self.consumer.name().to_owned(), self.db.dialect);
            processed = self
                .db
                .batches()
                .run_one_trip(Box::new(move |conn, savepoint_move| {
                    Box::pin(async move {
                        Ok::<_, ConsumeError>(
                            effect
                                .write_with_inbox(conn, dialect, savepoint_move, &consumer, now)
                                .await?,
                        )
                    })
                }))
                .await?;
        }
        let now = self.clock.now().0;
        let lag = self.metrics.consume_lag.get_or_create(&ConsumerName {
            consumer: self.consumer.name().to_owned(),
        });
        Ok(messages
            .iter()
            .map(|m| {
                if !self.consumer.handles(&m.event_type) {
                    Outcome::Ignored
                } else if processed.remove(&m.event_id) {
                    lag.observe((now - m.occurred_at).max(0) as f64 / 1000.0);
                    Outcome::Processed
                } else {
                    Outcome::Duplicate
                }
            })
            .collect())
    }

    /// Handles deliveries that arrived together: one [`process_batch`] for
    /// all that decode, then each settled in its own span (which continues
    /// the trace of the request that wrote its event). If the batch was
    /// refused, each delivery is handled alone, so one bad message is
    /// retried or parked without holding up the others.
    ///
    /// [`process_batch`]: ConsumerRunner::process_batch
    pub async fn handle_batch(&self, deliveries: Vec<Delivery>) {
        if deliveries.len() == 1 {
            let delivery = deliveries.into_iter().next().expect("one delivery");
            return self.handle(delivery).await;
        }
        let (decoded, undecodable): (Vec<_>, Vec<_>) = deliveries
            .into_iter()
            .map(|d| (d.message(), d))
            .partition(|(m, _)| m.is_ok());
        let alone = undecodable.into_iter().map(|(_, d)| self.handle(d));
        let (messages, deliveries): (Vec<EventMessage>, Vec<Delivery>) = decoded
            .into_iter()
            .map(|(m, d)| (m.expect("partitioned on decoding"), d))
            .unzip();
        let batch = async {
            if messages.is_empty() {
                return;
            }
            let result = self
                .process_batch(&messages)
                .instrument(info_span!(
                    "consume a batch of events",
                    consumer = self.consumer.name(),
                    events = messages.len()
                ))
                .await;
            match result {
                Ok(outcomes) => {
                    let settled = deliveries.into_iter().zip(&messages).zip(outcomes);
                    join_all(settled.map(|((d, m), outcome)| {
                        let span = self.span(&d, Some(m));
                        self.settle_processed(d, outcome).instrument(span)
                    }))
                    .await;
                }
                Err(e @ ConsumeError::Unavailable(_)) => {
                    warn!(consumer = self.consumer.name(), error = %error_chain(&e), events = deliveries.len(), "database unavailable; will redeliver");
                    join_all(deliveries.into_iter().map(|d| async move {
                        settle_logged(d.settle.retry(self.delay(d.attempt)).await);
                    }))
                    .await;
                }
                Err(e) => {
                    debug!(error = %error_chain(&e), "a batch was refused; handling its messages one by one");
                    join_all(deliveries.into_iter().map(|d| self.handle(d))).await;
                }
            }
        };
        futures::join!(join_all(alone), batch);
    }

    /// Processes one delivery and settles it: ack after the effect (or
    /// after parking it), retry otherwise.
    pub async fn handle(&self, delivery: Delivery) {
        let span = self.span(&delivery, delivery.message().ok().as_ref());
        self.handle_in_span(delivery).instrument(span).await
    }

    /// The span of one delivery, continuing the trace of the request that
    /// wrote its event.
    fn span(&self, delivery: &Delivery, message: Option<&EventMessage>) -> tracing::Span {
        let span = info_span!(
            "consume an event",
            consumer = self.consumer.name(),
            message_id = delivery.message_id.as_deref().unwrap_or(""),
            attempt = delivery.attempt,
            otel.kind = "consumer",
        );
        if let Some(parent) = message
            .and_then(|m| m.traceparent.as_deref())
            .and_then(once_telemetry::context::parse_traceparent)
        {
            use opentelemetry::trace::TraceContextExt as _;
            use tracing_opentelemetry::OpenTelemetrySpanExt as _;
            let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
        }
        span
    }

    /// Acknowledges a delivery whose message was processed (or found a
    /// duplicate, or ignored).
    async fn settle_processed(&self, delivery: Delivery, outcome: Outcome) {
        if outcome == Outcome::Processed {
            // The crash a consumer must survive: effect committed, not yet
            // acknowledged.
            crash_point("after_consume");
        }
        self.metrics.consumed(
            self.consumer.name(),
            match outcome {
                Outcome::Processed => "processed",
                Outcome::Duplicate => "duplicate",
                Outcome::Ignored => "ignored",
            },
        );
        debug!(?outcome, "consumed");
        settle_logged(delivery.settle.ack().await);
    }

    async fn handle_in_span(&self, delivery: Delivery) {
        let name = self.consumer.name();
        let message = match delivery.message() {
            Ok(message) => message,
            Err(e) => {
                let raw = String::from_utf8_lossy(&delivery.payload).into_owned();
                let id = delivery.message_id.clone().unwrap_or_else(|| {
                    format!(
                        "undecodable_{}",
                        hex::encode(Sha256::digest(&delivery.payload))
                    )
                });
                let error = ConsumeError::Poison(e);
                self.park(&delivery, &id, "unknown", &raw, &error).await;
                return;
            }
        };
        match self.process(&message).await {
            Ok(outcome) => self.settle_processed(delivery, outcome).await,
            Err(e @ ConsumeError::Unavailable(_)) => {
                warn!(error = %error_chain(&e), "database unavailable; will redeliver");
                settle_logged(delivery.settle.retry(self.delay(delivery.attempt)).await);
            }
            Err(e)
                if matches!(e, ConsumeError::Poison(_))
                    || delivery.attempt >= self.max_attempts =>
            {
                let raw = String::from_utf8_lossy(&delivery.payload).into_owned();
                self.park(&delivery, &message.event_id, &message.event_type, &raw, &e)
                    .await;
            }
            Err(e) => {
                self.metrics.consumed(name, "retried");
                warn!(error = %error_chain(&e), max_attempts = self.max_attempts, "attempt failed; will redeliver");
                settle_logged(delivery.settle.retry(self.delay(delivery.attempt)).await);
            }
        }
    }

    /// Dead-letters the message and acknowledges it; if even that fails the
    /// message is redelivered and parked next time.
    async fn park(
        &self,
        delivery: &Delivery,
        message_id: &str,
        event_type: &str,
        raw: &str,
        error: &ConsumeError,
    ) {
        let letter = DeadLetter::new(
            self.consumer.name(),
            message_id,
            event_type,
            raw,
            i64::from(delivery.attempt),
            &error_chain(error),
            self.clock.now(),
        );
        match dead_letters::park(&self.db, &letter, error.code()).await {
            Ok(()) => {
                self.metrics.consumed(self.consumer.name(), "dead_lettered");
                warn!(error = %letter.last_error, attempts = delivery.attempt, "message dead-lettered");
                settle_logged(delivery.settle.ack().await);
            }
            Err(e) => {
                warn!(error = %error_chain(&e), "dead-lettering failed; will redeliver");
                settle_logged(delivery.settle.retry(self.delay(delivery.attempt)).await);
            }
        }
    }

    fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(6);
        (self.backoff * factor).min(Duration::from_secs(30))
    }

    /// Handles the deliveries it has taken: those waiting as one more batch,
    /// and every batch in flight to its end, so that a consumer that stops
    /// (a deploy) or subscribes again settles what it took instead of
    /// leaving it to the broker's redelivery timeout (`ack_wait`, 30 s by
    /// default). The node bounds how long it waits for this
    /// (`EventWorkers::join`); a batch cut short there was not acknowledged,
    /// and is delivered again.
    async fn finish<'a>(&'a self, waiting: Vec<Delivery>, mut in_flight: InFlight<'a>) {
        if !waiting.is_empty() {
            in_flight.push(self.handle_batch(waiting).boxed());
        }
        while in_flight.next().await.is_some() {}
    }

    /// Receives and handles deliveries until `shutdown` flips, subscribing
    /// again whenever the subscription breaks; either way it first finishes
    /// the deliveries it has taken ([`ConsumerRunner::finish`]).
    /// `first` is a subscription made before the publisher started (the
    /// in-process bus only delivers to groups that exist when it publishes).
    pub async fn run(
        self,
        mut first: Option<Box<dyn Subscription>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let name = self.consumer.name().to_owned();
        loop {
            let mut subscription = if let Some(s) = first.take() {
                s
            } else {
                tokio::select! {
                    s = self.broker.subscribe(&name) => match s {
                        Ok(s) => s,
                        Err(e) => {
                            warn!(consumer = %name, error = %e, "subscribing failed; will retry");
                            tokio::select! {
                                _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                                _ = shutdown.changed() => return,
                            }
                        }
                    },
                    _ = shutdown.changed() => return,
                }
            };
            // Deliveries received are handled in batches (up to `BATCH`).
            // A batch starts when none is in flight, or when a whole batch
            // waits (up to `IN_FLIGHT` at once): while one commits, those
            // that arrive gather into the next, so under load a consumer
            // writes few large batches rather than many small ones, each a
            // statement and a savepoint of its own (decision 0051).
            let mut in_flight: InFlight<'_> = FuturesUnordered::new();
            let mut waiting = Vec::new();
            loop {
                let idle = in_flight.is_empty();
                if !waiting.is_empty()
                    && (idle || (waiting.len() >= BATCH && in_flight.len() < IN_FLIGHT))
                {
                    // (Never more than `BATCH` wait: receiving stops there.)
                    in_flight.push(self.handle_batch(std::mem::take(&mut waiting)).boxed());
                    continue;
                }
                let delivery = tokio::select! {
                    d = subscription.next(), if waiting.len() < BATCH => d,
                    Some(()) = in_flight.next(), if !idle => continue,
                    _ = shutdown.changed() => {
                        self.finish(waiting, in_flight).await;
                        return;
                    }
                };
                let broke = match delivery {
                    Ok(first) => gather(first, &mut waiting, &mut subscription),
                    Err(e) => Some(e),
                };
                match broke {
                    None => {}
                    Some(BrokerError::Closed) if *shutdown.borrow() => {
                        self.finish(waiting, in_flight).await;
                        return;
                    }
                    Some(e) => {
                        warn!(consumer = %name, error = %e, "subscription broke; subscribing again");
                        self.finish(waiting, in_flight).await;
                        break;
                    }
                }
            }
        }
    }

    /// Runs the dead letters an operator asked to redrive (`once events
    /// redrive ID`), every `interval`, until `shutdown` flips.
    pub async fn run_redrives(self, interval: Duration, mut shutdown: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.changed() => return,
            }
            if let Err(e) = self.redrive_requested().await {
                warn!(consumer = self.consumer.name(), error = %error_chain(&e), "redrive round failed");
            }
        }
    }

    /// Processes every dead letter of this consumer whose redrive was
    /// requested: effect, inbox row revived and the letter marked redriven
    /// in one transaction; a failure puts the letter back as dead with the
    /// new error. Returns how many were redriven.
    #[instrument(name = "redrive dead letters", skip_all, fields(consumer = self.consumer.name()))]
    pub async fn redrive_requested(&self) -> Result<usize, sqlx::Error> {
        let letters = dead_letters::redrive_requested(&self.db, self.consumer.name()).await?;
        let mut redriven = 0;
        for letter in letters {
            match self.redrive(&letter).await {
                Ok(()) => {
                    redriven += 1;
                    self.metrics.consumed(self.consumer.name(), "redriven");
                    info!(id = letter.id, message_id = %letter.message_id, "dead letter redriven");
                }
                Err(e) => {
                    warn!(id = letter.id, error = %error_chain(&e), "redrive failed; back to dead");
                    dead_letters::redrive_failed(&self.db, letter.id, &error_chain(&e)).await?;
                }
            }
        }
        Ok(redriven)
    }

    async fn redrive(&self, letter: &DeadLetter) -> Result<(), ConsumeError> {
        let message = EventMessage::from_bytes(letter.message.as_bytes())?;
        let now = self.clock.now();
        let mut tx = self
            .db
            .pool
            .begin()
            .await
            .map_err(|e| ConsumeError::Unavailable(e.into()))?;
        // Only the first redrive writes the effect; a racing one (another
        // node) finds the inbox row already revived.
        if inbox::revive(&mut *tx, self.consumer.name(), &message.event_id, now).await? {
            self.consumer
                .effect(std::slice::from_ref(&message), now)?
                .write(&mut tx, self.consumer.name(), now)
                .await?;
        }
        dead_letters::mark_redriven(&mut *tx, letter.id, now).await?;
        tx.commit()
            .await
            .map_err(|e| ConsumeError::Unavailable(e.into()))?;
        Ok(())
    }
}

/// Adds `first` and the deliveries already received behind it to
/// `waiting`, up to [`BATCH`]; returns the error that stopped the
/// gathering, if one did.
fn gather(
    first: Delivery,
    waiting: &mut Vec<Delivery>,
    subscription: &mut Box<dyn Subscription>,
) -> Option<BrokerError> {
    waiting.push(first);
    while waiting.len() < BATCH {
        // `next` is cancel-safe: a delivery not ready now stays queued.
        match subscription.next().now_or_never() {
            Some(Ok(delivery)) => waiting.push(delivery),
            Some(Err(e)) => return Some(e),
            None => break,
        }
    }
    None
}

fn settle_logged(result: Result<(), BrokerError>) {
    if let Err(e) = result {
        // The broker will redeliver; the inbox makes that harmless.
        warn!(error = %e, "settling a delivery failed");
    }
}
