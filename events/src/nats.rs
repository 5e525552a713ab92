//! NATS JetStream as the broker (production).
//!
//! - One stream (`EventsConfig::stream`) on `<subject_prefix>.>`; events go to
//!   `<subject_prefix>.<event type>`.
//! - Every publish carries the event id as `Nats-Msg-Id`, so within the
//!   stream's duplicate window JetStream itself drops a re-publish (the
//!   publisher crashed after publishing, before marking the row).
//! - Each consumer is a durable pull consumer named after it, with explicit
//!   acks: instances of one consumer share its deliveries, an unacknowledged
//!   delivery comes back after `ack_wait` (or at once after a `Nak`), and the
//!   delivery count JetStream keeps is the attempt number the runner uses to
//!   decide when to dead-letter.

use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::pull, context::Publish, stream};
use async_trait::async_trait;
use futures::StreamExt;
use tracing::instrument;

use crate::broker::{Broker, BrokerError, Delivery, Settle, Subscription};
use crate::config::EventsConfig;
use crate::message::EventMessage;

#[derive(Debug, Clone)]
pub struct NatsBroker {
    js: jetstream::Context,
    stream: String,
    subject_prefix: String,
    ack_wait: Duration,
}

impl NatsBroker {
    /// Connects and creates the stream if it does not exist.
    #[instrument(skip_all, fields(url = %url, stream = %config.stream))]
    pub async fn connect(url: &str, config: &EventsConfig) -> Result<Self, BrokerError> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(BrokerError::unavailable)?;
        let js = jetstream::new(client);
        js.get_or_create_stream(stream::Config {
            name: config.stream.clone(),
            subjects: vec![format!("{}.>", config.subject_prefix)],
            duplicate_window: config.duplicate_window,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(BrokerError::unavailable)?;
        Ok(Self {
            js,
            stream: config.stream.clone(),
            subject_prefix: config.subject_prefix.clone(),
            ack_wait: config.ack_wait,
        })
    }

    pub fn subject_of(&self, event_type: &str) -> String {
        format!("{}.{event_type}", self.subject_prefix)
    }
}

#[async_trait]
impl Broker for NatsBroker {
    #[instrument(skip_all, fields(events = batch.len()))]
    async fn publish(&self, batch: &[EventMessage]) -> Result<(), BrokerError> {
        // Send the whole batch in order, then wait for the acks: one round
        // trip per batch instead of one per event.
        let mut acks = Vec::with_capacity(batch.len());
        for message in batch {
            let ack = self
                .js
                .send_publish(self.subject_of(&message.event_type), {
                    let publish = Publish::build().message_id(message.event_id.as_str());
                    // Also as a NATS header, for tools that read headers.
                    let publish = match &message.traceparent {
                        Some(t) => publish.header("traceparent", t.as_str()),
                        None => publish,
                    };
                    publish.payload(message.to_bytes().into())
                })
                .await
                .map_err(BrokerError::unavailable)?;
            acks.push(ack);
        }
        for ack in acks {
            // `duplicate: true` is JetStream dropping a re-publish: success.
            ack.await.map_err(BrokerError::unavailable)?;
        }
        Ok(())
    }

    async fn subscribe(&self, consumer: &str) -> Result<Box<dyn Subscription>, BrokerError> {
        let stream = self
            .js
            .get_stream(&self.stream)
            .await
            .map_err(BrokerError::unavailable)?;
        let durable: pull::Stream = stream
            .get_or_create_consumer(
                consumer,
                pull::Config {
                    durable_name: Some(consumer.to_owned()),
                    ack_policy: jetstream::consumer::AckPolicy::Explicit,
                    ack_wait: self.ack_wait,
                    // The runner dead-letters; JetStream must keep redelivering.
                    max_deliver: -1,
                    filter_subject: format!("{}.>", self.subject_prefix),
                    ..Default::default()
                },
            )
            .await
            .map_err(BrokerError::unavailable)?
            .messages()
            .await
            .map_err(BrokerError::unavailable)?;
        Ok(Box::new(NatsSubscription { messages: durable }))
    }

    fn kind(&self) -> &'static str {
        "nats"
    }
}

struct NatsSubscription {
    messages: pull::Stream,
}

impl std::fmt::Debug for NatsSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSubscription").finish_non_exhaustive()
    }
}

#[async_trait]
impl Subscription for NatsSubscription {
    async fn next(&mut self) -> Result<Delivery, BrokerError> {
        let message = self
            .messages
            .next()
            .await
            .ok_or(BrokerError::Closed)?
            .map_err(BrokerError::unavailable)?;
        let attempt = message
            .info()
            .map(|info| u32::try_from(info.delivered).unwrap_or(u32::MAX))
            .map_err(BrokerError::unavailable)?;
        let message_id = message
            .headers
            .as_ref()
            .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
            .map(|v| v.as_str().to_owned());
        Ok(Delivery {
            payload: message.payload.clone(),
            message_id,
            attempt,
            settle: Box::new(NatsSettle(message)),
        })
    }
}

struct NatsSettle(jetstream::Message);

impl std::fmt::Debug for NatsSettle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("NatsSettle").field(&self.0.subject).finish()
    }
}

#[async_trait]
impl Settle for NatsSettle {
    async fn ack(&self) -> Result<(), BrokerError> {
        // A double ack (`AckAck`) would wait for the server's confirmation;
        // a lost plain ack only means one redelivery, which the inbox absorbs.
        self.0.ack().await.map_err(BrokerError::unavailable)
    }

    async fn retry(&self, delay: Duration) -> Result<(), BrokerError> {
        self.0
            .ack_with(AckKind::Nak(Some(delay)))
            .await
            .map_err(BrokerError::unavailable)
    }
}
