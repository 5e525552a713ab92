//! The broker seen by the publisher and the consumers: publish a batch of
//! events, receive deliveries, settle each one. NATS JetStream
//! ([`super::nats`]) in production, the in-process bus ([`super::bus`]) for
//! the embedded default; both give the same guarantees to the code here:
//!
//! - `publish` returns only once every event of the batch is stored (NATS) or
//!   settled by every consumer (bus), so marking outbox rows published after
//!   it never loses an event;
//! - a delivery that is not acknowledged comes back (at-least-once), with its
//!   attempt number, so consumers must dedupe — they do, on the event id.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::message::EventMessage;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("broker unavailable: {0}")]
    Unavailable(String),
    #[error("broker refused: {0}")]
    Refused(String),
    /// The subscription ended (node shutting down, connection closed).
    #[error("subscription closed")]
    Closed,
}

impl BrokerError {
    pub fn unavailable(e: impl fmt::Display) -> Self {
        Self::Unavailable(e.to_string())
    }
}

#[async_trait]
pub trait Broker: Send + Sync + fmt::Debug + 'static {
    /// Publishes `batch` in order, each under its event id as message id.
    /// Ok means every event is durable in the broker (or, for the bus,
    /// settled by every consumer). On error some may have been published;
    /// publishing them again is safe.
    async fn publish(&self, batch: &[EventMessage]) -> Result<(), BrokerError>;

    /// Joins the consumer group `consumer`. Instances with the same name
    /// share the deliveries (each delivery goes to one of them).
    async fn subscribe(&self, consumer: &str) -> Result<Box<dyn Subscription>, BrokerError>;

    /// Which broker this is, for logs.
    fn kind(&self) -> &'static str;
}

#[async_trait]
pub trait Subscription: Send + fmt::Debug {
    /// The next delivery; [`BrokerError::Closed`] when there will be none.
    async fn next(&mut self) -> Result<Delivery, BrokerError>;
}

/// How a consumer settles a delivery.
#[async_trait]
pub trait Settle: Send + Sync + fmt::Debug {
    /// The effect exists: never deliver this again to this consumer group.
    async fn ack(&self) -> Result<(), BrokerError>;
    /// This attempt failed: deliver again after `delay`.
    async fn retry(&self, delay: Duration) -> Result<(), BrokerError>;
}

/// One delivery of one message to one consumer group.
#[derive(Debug)]
pub struct Delivery {
    /// The raw body: a consumer decodes it itself, so an undecodable body is
    /// a poison message it can dead-letter rather than a broker error.
    pub payload: Bytes,
    /// The broker's message id (the event id), used when the body cannot be
    /// decoded.
    pub message_id: Option<String>,
    /// 1 on first delivery.
    pub attempt: u32,
    pub settle: Box<dyn Settle>,
}

impl Delivery {
    pub fn message(&self) -> Result<EventMessage, crate::message::MessageError> {
        EventMessage::from_bytes(&self.payload)
    }
}
