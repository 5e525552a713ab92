//! Wiring the event path into a node: pick the broker and the email sender
//! from config, subscribe the consumers, then start the publisher, the
//! consumer runners, their redrivers and the email sender — each a task that
//! stops when the node's worker shutdown signal flips.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use once_db::Database;
use once_domain::Clock;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::broker::Broker;
use crate::bus::InProcessBus;
use crate::config::EventsConfig;
use crate::consumer::{Consumer, ConsumerRunner};
use crate::email::{EmailSenderWorker, ReceiptEmailConsumer};
use crate::email_sender::{EmailSender, FakeEmailSender, HttpEmailSender};
use crate::ledger::LedgerConsumer;
use crate::metrics::EventMetrics;
use crate::nats::NatsBroker;
use crate::outbox::Publisher;
use crate::webhook_events::WebhookEventsConsumer;

/// What tests (or an embedding program) may swap; config decides the rest.
#[derive(Debug, Default)]
pub struct Overrides {
    pub broker: Option<Arc<dyn Broker>>,
    pub email_sender: Option<Arc<dyn EmailSender>>,
    pub consumers: Option<Vec<Arc<dyn Consumer>>>,
}

/// The event path of one node, ready to start.
#[derive(Debug, Clone)]
pub struct Events {
    pub db: Database,
    pub broker: Arc<dyn Broker>,
    pub email_sender: Arc<dyn EmailSender>,
    pub consumers: Vec<Arc<dyn Consumer>>,
    pub config: EventsConfig,
    pub clock: Arc<dyn Clock>,
    pub metrics: EventMetrics,
}

impl Events {
    /// Connects to the broker the config names (NATS) or makes an
    /// in-process bus.
    pub async fn connect(
        db: Database,
        config: &EventsConfig,
        clock: Arc<dyn Clock>,
        metrics: EventMetrics,
        overrides: Overrides,
    ) -> anyhow::Result<Self> {
        let broker: Arc<dyn Broker> = match (overrides.broker, &config.nats_url) {
            (Some(broker), _) => broker,
            (None, Some(url)) => Arc::new(
                NatsBroker::connect(url, config)
                    .await
                    .with_context(|| format!("connecting to NATS at {url}"))?,
            ),
            (None, None) => Arc::new(InProcessBus::new()),
        };
        let email_sender: Arc<dyn EmailSender> =
            match (overrides.email_sender, &config.email_sink_url) {
                (Some(sender), _) => sender,
                (None, Some(url)) => Arc::new(HttpEmailSender::new(url)),
                (None, None) => Arc::new(FakeEmailSender::new()),
            };
        let consumers = overrides.consumers.unwrap_or_else(|| {
            vec![
                Arc::new(LedgerConsumer) as Arc<dyn Consumer>,
                Arc::new(ReceiptEmailConsumer),
                Arc::new(WebhookEventsConsumer),
            ]
        });
        Ok(Self {
            db,
            broker,
            email_sender,
            consumers,
            config: config.clone(),
            clock,
            metrics,
        })
    }

    pub fn runner(&self, consumer: Arc<dyn Consumer>) -> ConsumerRunner {
        ConsumerRunner::new(
            consumer,
            self.db.clone(),
            self.broker.clone(),
            self.clock.clone(),
            self.metrics.clone(),
            &self.config,
        )
    }

    pub fn publisher(&self) -> Publisher {
        Publisher::new(
            self.db.clone(),
            self.broker.clone(),
            self.clock.clone(),
            self.metrics.clone(),
            &self.config,
        )
    }

    pub fn sender_worker(&self) -> EmailSenderWorker {
        EmailSenderWorker::new(
            self.db.clone(),
            self.email_sender.clone(),
            self.clock.clone(),
            self.metrics.clone(),
        )
    }

    /// Starts every worker. Consumers subscribe before the publisher starts,
    /// so no event is published to a broker nobody listens on yet.
    pub async fn spawn(&self, shutdown: watch::Receiver<bool>) -> EventWorkers {
        let mut handles = Vec::new();
        for consumer in &self.consumers {
            let runner = self.runner(consumer.clone());
            for _ in 0..self.config.consumer_instances {
                let first = match self.broker.subscribe(consumer.name()).await {
                    Ok(s) => Some(s),
                    Err(e) => {
                        // The runner keeps trying; the publisher still waits
                        // for NATS itself to accept events.
                        warn!(consumer = consumer.name(), error = %e, "subscribing failed; the runner will retry");
                        None
                    }
                };
                handles.push(tokio::spawn(runner.clone().run(first, shutdown.clone())));
            }
            handles.push(tokio::spawn(
                runner.run_redrives(self.config.poll_interval, shutdown.clone()),
            ));
        }
        handles.push(tokio::spawn(
            self.publisher()
                .run(self.config.publish_interval, shutdown.clone()),
        ));
        handles.push(tokio::spawn(
            self.sender_worker()
                .run(self.config.poll_interval, shutdown.clone()),
        ));
        info!(
            broker = self.broker.kind(),
            consumers = self.consumers.len(),
            "event path started"
        );
        EventWorkers { handles }
    }
}

/// The running workers of [`Events::spawn`].
#[derive(Debug, Default)]
pub struct EventWorkers {
    handles: Vec<JoinHandle<()>>,
}

impl EventWorkers {
    /// Waits for the workers to stop after the shutdown signal, up to
    /// `limit`; any still running then (a delivery stuck on a dead
    /// database) is aborted, which is safe: nothing is acknowledged or
    /// marked before its effect commits.
    pub async fn join(self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        for handle in self.handles {
            let abort = handle.abort_handle();
            if tokio::time::timeout_at(deadline, handle).await.is_err() {
                abort.abort();
            }
        }
    }
}
