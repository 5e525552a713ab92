//! The in-process bus: the broker of the embedded default (`once up`, and
//! any node started without a NATS URL).
//!
//! It stores nothing. Its durability is the outbox: `publish` hands each
//! event to every consumer group and returns only when each group has
//! acknowledged it (after its effect committed) or dead-lettered it. So the
//! publisher marks a row published only after every effect exists, and a
//! crash at any point leaves the row unpublished, to be published again
//! after restart — where the consumers' inboxes drop the duplicate.
//!
//! The cost of that choice: a message being retried holds up the publisher
//! round it belongs to (at most `max_attempts` backoffs), while the other
//! events of the same round are delivered beside it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::broker::{Broker, BrokerError, Delivery, Settle, Subscription};
use crate::message::EventMessage;

/// A message on its way to one consumer group, with the channel its
/// settlement goes back on.
#[derive(Debug)]
struct Envelope {
    payload: Bytes,
    message_id: String,
    attempt: u32,
    settled: Arc<Mutex<Option<oneshot::Sender<()>>>>,
}

/// One consumer group: a queue every instance of that consumer reads from.
#[derive(Debug, Clone)]
struct Group {
    tx: mpsc::UnboundedSender<Envelope>,
    rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Envelope>>>,
}

#[derive(Debug, Clone, Default)]
pub struct InProcessBus {
    /// Consumer groups by name. A std mutex: held only to look a group up or
    /// add one, never across an await.
    groups: Arc<Mutex<HashMap<String, Group>>>,
}

impl InProcessBus {
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Broker for InProcessBus {
    async fn publish(&self, batch: &[EventMessage]) -> Result<(), BrokerError> {
        let groups: Vec<Group> = self
            .groups
            .lock()
            .expect("bus lock")
            .values()
            .cloned()
            .collect();
        if groups.is_empty() {
            // Nobody would ever see these events: keep them in the outbox.
            return Err(BrokerError::Unavailable(
                "no consumer has subscribed yet".into(),
            ));
        }
        let mut waits = Vec::with_capacity(batch.len() * groups.len());
        for message in batch {
            let payload = Bytes::from(message.to_bytes());
            for group in &groups {
                let (done, wait) = oneshot::channel();
                group
                    .tx
                    .send(Envelope {
                        payload: payload.clone(),
                        message_id: message.event_id.clone(),
                        attempt: 1,
                        settled: Arc::new(Mutex::new(Some(done))),
                    })
                    .map_err(|_| BrokerError::Closed)?;
                waits.push(wait);
            }
        }
        for wait in waits {
            // A dropped sender means the consumer went away before settling
            // (shutdown): the publisher must not mark the row published.
            wait.await.map_err(|_| {
                BrokerError::Unavailable("a consumer stopped before settling".into())
            })?;
        }
        Ok(())
    }

    async fn subscribe(&self, consumer: &str) -> Result<Box<dyn Subscription>, BrokerError> {
        let group = self
            .groups
            .lock()
            .expect("bus lock")
            .entry(consumer.to_owned())
            .or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                Group {
                    tx,
                    rx: Arc::new(tokio::sync::Mutex::new(rx)),
                }
            })
            .clone();
        Ok(Box::new(BusSubscription { group }))
    }

    fn kind(&self) -> &'static str {
        "in-process"
    }
}

#[derive(Debug)]
struct BusSubscription {
    group: Group,
}

#[async_trait]
impl Subscription for BusSubscription {
    async fn next(&mut self) -> Result<Delivery, BrokerError> {
        let envelope = self
            .group
            .rx
            .lock()
            .await
            .recv()
            .await
            .ok_or(BrokerError::Closed)?;
        Ok(Delivery {
            payload: envelope.payload.clone(),
            message_id: Some(envelope.message_id.clone()),
            attempt: envelope.attempt,
            settle: Box::new(BusSettle {
                envelope: Mutex::new(Some(envelope)),
                requeue: self.group.tx.clone(),
            }),
        })
    }
}

#[derive(Debug)]
struct BusSettle {
    envelope: Mutex<Option<Envelope>>,
    requeue: mpsc::UnboundedSender<Envelope>,
}

#[async_trait]
impl Settle for BusSettle {
    async fn ack(&self) -> Result<(), BrokerError> {
        if let Some(envelope) = self.envelope.lock().expect("settle lock").take()
            && let Some(done) = envelope.settled.lock().expect("settle lock").take()
        {
            let _ = done.send(());
        }
        Ok(())
    }

    async fn retry(&self, delay: Duration) -> Result<(), BrokerError> {
        let Some(envelope) = self.envelope.lock().expect("settle lock").take() else {
            return Ok(());
        };
        let requeue = self.requeue.clone();
        // The backoff of a failed delivery, as a broker's redelivery delay
        // would be; the publisher stays blocked on `settled` meanwhile.
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = requeue.send(Envelope {
                attempt: envelope.attempt + 1,
                ..envelope
            });
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str) -> EventMessage {
        EventMessage {
            event_id: id.into(),
            event_type: "payment.succeeded".into(),
            schema_version: 1,
            aggregate_id: "pay_1".into(),
            tenant_id: "acme".into(),
            occurred_at: 0,
            data: serde_json::json!({}),
            traceparent: None,
        }
    }

    #[tokio::test]
    async fn publish_waits_until_every_group_acknowledges() {
        let bus = InProcessBus::new();
        let mut ledger = bus.subscribe("ledger").await.unwrap();
        let mut email = bus.subscribe("email").await.unwrap();
        let publish = tokio::spawn({
            let bus = bus.clone();
            async move { bus.publish(&[event("evt_1")]).await }
        });
        let first = ledger.next().await.unwrap();
        first.settle.ack().await.unwrap();
        // Single-threaded test runtime: a few yields let the publish task
        // run to wherever it blocks.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!publish.is_finished(), "email has not settled yet");
        let second = email.next().await.unwrap();
        assert_eq!(second.message_id.as_deref(), Some("evt_1"));
        second.settle.ack().await.unwrap();
        publish.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_retried_delivery_comes_back_with_the_next_attempt_number() {
        let bus = InProcessBus::new();
        let mut ledger = bus.subscribe("ledger").await.unwrap();
        let publish = tokio::spawn({
            let bus = bus.clone();
            async move { bus.publish(&[event("evt_1")]).await }
        });
        let first = ledger.next().await.unwrap();
        assert_eq!(first.attempt, 1);
        first.settle.retry(Duration::from_millis(1)).await.unwrap();
        let again = ledger.next().await.unwrap();
        assert_eq!(again.attempt, 2);
        again.settle.ack().await.unwrap();
        publish.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_consumer_that_goes_away_fails_the_publish() {
        let bus = InProcessBus::new();
        let mut ledger = bus.subscribe("ledger").await.unwrap();
        let publish = tokio::spawn({
            let bus = bus.clone();
            async move { bus.publish(&[event("evt_1")]).await }
        });
        let delivery = ledger.next().await.unwrap();
        drop(delivery);
        assert!(publish.await.unwrap().is_err());
    }
}
