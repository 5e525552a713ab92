//! The event path (DESIGN §7): outbox → publisher → broker → deduplicating
//! consumers → ledger entry and receipt email. Every scenario runs on both
//! brokers (NATS JetStream and the in-process bus) and both databases.
//!
//! NATS scenarios need a JetStream server at `NATS_URL` (default
//! `nats://127.0.0.1:4222`); without one they are skipped locally and fail
//! under `CI=true`. Each test uses a stream and subjects of its own (random
//! suffix) and deletes its stream at the end.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use once_node::domain::{SystemClock, UnixMillis};
use once_node::events::broker::{BrokerError, Delivery, Settle, Subscription};
use once_node::events::consumer::{ConsumeError, Consumer, Outcome};
use once_node::events::email::dedupe_key;
use once_node::events::email_sender::FakeEmailSender;
use once_node::events::ledger::LedgerConsumer;
use once_node::events::message::{PAYMENT_DECLINED, PAYMENT_SUCCEEDED};
use once_node::events::runtime::Overrides;
use once_node::events::{EventMessage, Events, EventsConfig};
use once_node::metrics::EventMetrics;
use once_node::sql::Database;
use once_node::{ApiKeys, Application};
use sqlx::Row;
use tokio::sync::watch;

use once_test_support::cleanup;
use once_test_support::services::{nats_available, nats_url};
use once_test_support::stoppable::Stoppable;

use crate::helpers::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerKind {
    InProcess,
    Nats,
}

/// NATS is there (else the test is skipped), with one stream that no test
/// deletes. nats-server 2.9 removes its account's stream directory when the
/// last stream goes; a test creating its stream at that moment failed with
/// "could not create storage directory" (JetStream error 10049, seen once
/// under CI). A stream that stays keeps the directory.
async fn nats_ready() -> bool {
    if !nats_available().await {
        return false;
    }
    let client = async_nats::connect(nats_url())
        .await
        .expect("connect to NATS");
    async_nats::jetstream::new(client)
        .get_or_create_stream(async_nats::jetstream::stream::Config {
            name: "T_KEEPS_THE_STREAM_DIRECTORY".into(),
            subjects: vec!["tkeepsthestreamdirectory".into()],
            ..Default::default()
        })
        .await
        .expect("the stream that keeps JetStream's directory");
    true
}

/// One `#[tokio::test]` per (database, broker) for an
/// `async fn(Backend, BrokerKind)`.
macro_rules! on_every_backend_and_broker {
    ($($scenario:ident),+ $(,)?) => {
        $(
            mod $scenario {
                use super::BrokerKind;
                use $crate::helpers::Backend;
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite_in_process() {
                    super::$scenario(Backend::Sqlite, BrokerKind::InProcess).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite_nats() {
                    if super::nats_ready().await {
                        super::$scenario(Backend::Sqlite, BrokerKind::Nats).await
                    }
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres_in_process() {
                    if $crate::helpers::postgres_available() {
                        super::$scenario(Backend::Postgres, BrokerKind::InProcess).await
                    }
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres_nats() {
                    if $crate::helpers::postgres_available() && super::nats_ready().await {
                        super::$scenario(Backend::Postgres, BrokerKind::Nats).await
                    }
                }
            }
        )+
    };
}

on_every_backend_and_broker!(
    the_same_event_delivered_twice_then_ten_times_has_one_effect,
    the_same_event_raced_by_two_consumer_instances_has_one_effect,
    a_poison_message_is_dead_lettered_while_others_flow_and_redrives_once_fixed,
    a_payment_becomes_one_ledger_entry_and_one_receipt_email,
);

crate::on_sql_backends!(
    a_batch_of_deliveries_writes_each_effect_once_and_a_refused_one_fails_alone,
    deliveries_that_arrive_while_a_batch_commits_gather_into_the_next,
    a_consumer_that_stops_finishes_the_deliveries_it_took,
);

/// Event settings of one test: its own stream and subjects, fast retries.
pub fn events_config(broker: BrokerKind) -> EventsConfig {
    let id = uuid::Uuid::new_v4().simple().to_string();
    EventsConfig {
        nats_url: (broker == BrokerKind::Nats).then(nats_url),
        stream: format!("T_{id}"),
        subject_prefix: format!("t{id}.events"),
        ack_wait: Duration::from_secs(1),
        max_attempts: 3,
        retry_backoff: Duration::from_millis(20),
        publish_interval: Duration::from_millis(10),
        poll_interval: Duration::from_millis(50),
        consumer_instances: 4,
        ..EventsConfig::default()
    }
}

/// Deletes the test's JetStream stream when the test ends, passed or failed.
struct StreamGuard(EventsConfig);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let Some(url) = self.0.nats_url.clone() else {
            return;
        };
        let stream = self.0.stream.clone();
        cleanup::run(async move {
            if let Ok(client) = async_nats::connect(url).await {
                let _ = async_nats::jetstream::new(client)
                    .delete_stream(&stream)
                    .await;
            }
        });
    }
}

/// The event path of a test, without an HTTP node: its own database pool,
/// broker and fake email sender, workers running until `stop`.
struct EventHarness {
    events: Events,
    metrics: EventMetrics,
    stop: watch::Sender<bool>,
    workers: Option<once_node::events::EventWorkers>,
}

impl EventHarness {
    async fn start(db: &TestDb, config: &EventsConfig, overrides: Overrides) -> Self {
        let database = Database::connect(&db.url, 8).await.expect("connect");
        database.migrate().await.expect("migrate");
        let metrics = EventMetrics::unregistered();
        let events = Events::connect(
            database,
            config,
            Arc::new(SystemClock),
            metrics.clone(),
            overrides,
        )
        .await
        .expect("event path connects");
        let (stop, stopped) = watch::channel(false);
        let workers = events.spawn(stopped).await;
        Self {
            events,
            metrics,
            stop,
            workers: Some(workers),
        }
    }

    fn settled(&self, consumer: &str) -> u64 {
        ["processed", "duplicate", "dead_lettered"]
            .iter()
            .map(|o| self.metrics.consumed_count(consumer, o))
            .sum()
    }

    async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(workers) = self.workers.take() {
            workers.join(Duration::from_secs(5)).await;
        }
    }
}

/// A `payment.succeeded` event as `engine::execute` writes it.
fn succeeded(payment_id: &str) -> EventMessage {
    EventMessage {
        event_id: format!("evt_{}", uuid::Uuid::now_v7().simple()),
        event_type: PAYMENT_SUCCEEDED.into(),
        schema_version: 1,
        aggregate_id: payment_id.into(),
        tenant_id: "acme".into(),
        occurred_at: 1_700_000_000_000,
        data: serde_json::json!({
            "paymentId": payment_id, "tenantId": "acme", "accountId": "acc_1",
            "merchantReference": format!("ref-{payment_id}"), "amount": "25.00",
            "currency": "EUR", "amountMinor": 2500, "status": "succeeded", "declineCode": null
        }),
        traceparent: None,
    }
}

/// Delivers `message` `times` times to every consumer group. On NATS each
/// copy goes out under its own `Nats-Msg-Id` — what a re-publish after the
/// broker's duplicate window looks like — so JetStream really delivers every
/// copy and only the consumers' inboxes can dedupe them. On the bus, the
/// copies are published concurrently.
async fn deliver(config: &EventsConfig, events: &Events, message: &EventMessage, times: usize) {
    match &config.nats_url {
        Some(url) => {
            let client = async_nats::connect(url).await.expect("connect to NATS");
            let js = async_nats::jetstream::new(client);
            let subject = format!("{}.{}", config.subject_prefix, message.event_type);
            let round = uuid::Uuid::new_v4().simple();
            let mut acks = Vec::new();
            for i in 0..times {
                let publish = async_nats::jetstream::context::Publish::build()
                    .message_id(format!("{}#copy-{round}-{i}", message.event_id))
                    .payload(message.to_bytes().into());
                acks.push(
                    js.send_publish(subject.clone(), publish)
                        .await
                        .expect("publish"),
                );
            }
            for ack in acks {
                let ack = ack.await.expect("stored");
                assert!(!ack.duplicate, "each copy is a distinct broker message");
            }
        }
        None => {
            let publishes = (0..times).map(|_| {
                let broker = events.broker.clone();
                let message = message.clone();
                tokio::spawn(async move { broker.publish(&[message]).await })
            });
            for p in futures::future::join_all(publishes).await {
                p.unwrap().expect("bus publish settles");
            }
        }
    }
}

async fn count(db: &TestDb, sql: &str, bind: &str) -> i64 {
    let pool = db.pool().await;
    let n: i64 = sqlx::query(sql)
        .bind(bind)
        .fetch_one(&pool.pool)
        .await
        .expect(sql)
        .try_get(0)
        .unwrap();
    pool.pool.close().await;
    n
}

async fn ledger_entries(db: &TestDb, payment_id: &str) -> i64 {
    count(
        db,
        "SELECT COUNT(*) FROM ledger_entries WHERE source_payment_id = $1",
        payment_id,
    )
    .await
}

/// Inbox rows of the ledger and receipt-email consumers these scenarios
/// are about (the `webhooks` consumer has its own: tests/api/webhooks.rs).
async fn inbox_rows(db: &TestDb, message_id: &str) -> i64 {
    count(
        db,
        "SELECT COUNT(*) FROM consumer_inbox WHERE message_id = $1 AND consumer_name IN ('ledger', 'receipt-email')",
        message_id,
    )
    .await
}

async fn notifications(db: &TestDb, payment_id: &str, status: &str) -> i64 {
    let pool = db.pool().await;
    let n: i64 = sqlx::query(
        "SELECT COUNT(*) FROM email_notifications WHERE payment_id = $1 AND status = $2",
    )
    .bind(payment_id)
    .bind(status)
    .fetch_one(&pool.pool)
    .await
    .unwrap()
    .try_get(0)
    .unwrap();
    pool.pool.close().await;
    n
}

const WAIT: Duration = Duration::from_secs(30);

async fn the_same_event_delivered_twice_then_ten_times_has_one_effect(
    backend: Backend,
    broker: BrokerKind,
) {
    let db = TestDb::new(backend).await;
    let config = events_config(broker);
    let _stream = StreamGuard(config.clone());
    let sender = FakeEmailSender::new();
    let harness = EventHarness::start(
        &db,
        &config,
        Overrides {
            email_sender: Some(Arc::new(sender.clone())),
            ..Overrides::default()
        },
    )
    .await;
    let message = succeeded("pay_dup_1");

    for (times, settled) in [(2, 2), (10, 12)] {
        deliver(&config, &harness.events, &message, times).await;
        eventually(WAIT, || async {
            (harness.settled("ledger") == settled && harness.settled("receipt-email") == settled)
                .then_some(())
        })
        .await;
        eventually(WAIT, || async {
            (notifications(&db, "pay_dup_1", "SENT").await == 1).then_some(())
        })
        .await;
        assert_eq!(ledger_entries(&db, "pay_dup_1").await, 1);
        assert_eq!(
            inbox_rows(&db, &message.event_id).await,
            2,
            "one inbox row per consumer"
        );
        assert_eq!(
            harness.metrics.consumed_count("ledger", "processed"),
            1,
            "{times} deliveries: one processed"
        );
        assert_eq!(
            harness.metrics.consumed_count("ledger", "duplicate"),
            settled - 1
        );
    }
    assert_eq!(sender.sends(), 1, "one email sent, once");
    assert_eq!(
        sender.delivered().into_keys().collect::<Vec<_>>(),
        [dedupe_key("pay_dup_1")]
    );
    harness.stop().await;
}

async fn the_same_event_raced_by_two_consumer_instances_has_one_effect(
    backend: Backend,
    broker: BrokerKind,
) {
    let db = TestDb::new(backend).await;
    let config = events_config(broker);
    let _stream = StreamGuard(config.clone());
    // One email service behind both instances, like production.
    let sender = FakeEmailSender::new();
    let shared_bus: Arc<dyn once_node::events::Broker> =
        Arc::new(once_node::events::bus::InProcessBus::new());
    let overrides = || Overrides {
        email_sender: Some(Arc::new(sender.clone())),
        broker: (broker == BrokerKind::InProcess).then(|| shared_bus.clone()),
        consumers: None,
    };
    let a = EventHarness::start(&db, &config, overrides()).await;
    let b = EventHarness::start(&db, &config, overrides()).await;

    // Through the broker: ten copies shared out among 2 × 4 delivery loops.
    let message = succeeded("pay_race_1");
    deliver(&config, &a.events, &message, 10).await;
    eventually(WAIT, || async {
        (a.settled("ledger") + b.settled("ledger") == 10
            && a.settled("receipt-email") + b.settled("receipt-email") == 10)
            .then_some(())
    })
    .await;
    let processed = a.metrics.consumed_count("ledger", "processed")
        + b.metrics.consumed_count("ledger", "processed");
    assert_eq!(processed, 1, "exactly one delivery wrote the ledger entry");

    // Directly: both instances' runners race on one message, 10 each.
    let direct = succeeded("pay_race_2");
    let runners = [
        a.events.runner(Arc::new(LedgerConsumer)),
        b.events.runner(Arc::new(LedgerConsumer)),
    ];
    let attempts = (0..20).map(|i| {
        let runner = runners[i % 2].clone();
        let message = direct.clone();
        tokio::spawn(async move { runner.process(&message).await })
    });
    let outcomes: Vec<Outcome> = futures::future::join_all(attempts)
        .await
        .into_iter()
        .map(|r| r.unwrap().expect("no attempt fails"))
        .collect();
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == Outcome::Processed)
            .count(),
        1,
        "{outcomes:?}"
    );

    for payment in ["pay_race_1", "pay_race_2"] {
        assert_eq!(ledger_entries(&db, payment).await, 1, "{payment}");
    }
    eventually(WAIT, || async {
        (notifications(&db, "pay_race_1", "SENT").await == 1).then_some(())
    })
    .await;
    assert_eq!(inbox_rows(&db, &message.event_id).await, 2);
    assert_eq!(
        sender.delivered().into_keys().collect::<Vec<_>>(),
        [dedupe_key("pay_race_1")],
        "one email; a second send by the other instance could only repeat its token"
    );
    a.stop().await;
    b.stop().await;
}

/// The real ledger consumer, except that payments listed in `broken` fail —
/// a bug in the consumer that an operator later fixes.
#[derive(Debug, Clone, Default)]
struct BuggyLedger {
    broken: Arc<Mutex<HashSet<String>>>,
}

impl Consumer for BuggyLedger {
    fn name(&self) -> &str {
        "ledger"
    }
    fn handles(&self, event_type: &str) -> bool {
        LedgerConsumer.handles(event_type)
    }
    fn effect(
        &self,
        messages: &[EventMessage],
        now: UnixMillis,
    ) -> Result<once_node::events::effect::Effect, ConsumeError> {
        let broken = self.broken.lock().unwrap().clone();
        if let Some(message) = messages.iter().find(|m| broken.contains(&m.aggregate_id)) {
            return Err(ConsumeError::Effect(format!(
                "ledger rejects {}: account mapping missing",
                message.aggregate_id
            )));
        }
        LedgerConsumer.effect(messages, now)
    }
}

/// How each delivery of a test was settled, by message id.
#[derive(Debug, Clone, Default)]
struct Settled(Arc<Mutex<Vec<(String, &'static str)>>>);

impl Settled {
    fn delivery(&self, message_id: &str, payload: Vec<u8>) -> Delivery {
        Delivery {
            payload: payload.into(),
            message_id: Some(message_id.to_owned()),
            attempt: 1,
            settle: Box::new(SettleInto(message_id.to_owned(), self.clone())),
        }
    }

    fn sorted(&self) -> Vec<(String, &'static str)> {
        let mut all = self.0.lock().unwrap().clone();
        all.sort();
        all
    }
}

#[derive(Debug)]
struct SettleInto(String, Settled);

#[async_trait]
impl Settle for SettleInto {
    async fn ack(&self) -> Result<(), BrokerError> {
        self.1.0.lock().unwrap().push((self.0.clone(), "ack"));
        Ok(())
    }
    async fn retry(&self, _delay: Duration) -> Result<(), BrokerError> {
        self.1.0.lock().unwrap().push((self.0.clone(), "retry"));
        Ok(())
    }
}

/// Deliveries that arrive together are written as one batch (one query:
/// the effects of the messages new to the inbox, and their inbox rows), each
/// still once, and none whose message the inbox already holds; when the batch is
/// refused, each delivery is handled alone, so the bad one is retried (or
/// parked) and the others are written and acknowledged.
async fn a_batch_of_deliveries_writes_each_effect_once_and_a_refused_one_fails_alone(
    backend: Backend,
) {
    let db = TestDb::new(backend).await;
    let config = events_config(BrokerKind::InProcess);
    let harness = EventHarness::start(&db, &config, Overrides::default()).await;
    let ledger = BuggyLedger::default();
    let runner = harness.events.runner(Arc::new(ledger.clone()));

    // Two new events, one of them twice, and one the ledger does not handle.
    let (a, b) = (succeeded("pay_batch_a"), succeeded("pay_batch_b"));
    let declined = EventMessage {
        event_type: PAYMENT_DECLINED.into(),
        ..succeeded("pay_batch_declined")
    };
    let outcomes = runner
        .process_batch(&[a.clone(), b.clone(), a.clone(), declined])
        .await
        .expect("the batch commits");
    use Outcome::*;
    assert_eq!(outcomes, [Processed, Processed, Duplicate, Ignored]);
    // One already written, one new.
    let c = succeeded("pay_batch_c");
    let outcomes = runner
        .process_batch(&[b.clone(), c.clone()])
        .await
        .expect("the batch commits");
    assert_eq!(outcomes, [Duplicate, Processed]);
    // A message the inbox holds as parked (a dead letter): no effect, though
    // no entry exists for its payment, until an operator's redrive.
    let parked = succeeded("pay_batch_parked");
    let pool = db.pool().await.pool;
    once_node::events::inbox::record(
        &pool,
        "ledger",
        &parked.event_id,
        once_node::events::inbox::DEAD_LETTERED,
        Some("EFFECT_FAILED"),
        UnixMillis(1),
    )
    .await
    .unwrap();
    let outcomes = runner
        .process_batch(&[parked.clone(), c.clone()])
        .await
        .expect("the batch commits");
    assert_eq!(outcomes, [Duplicate, Duplicate]);
    assert_eq!(ledger_entries(&db, "pay_batch_parked").await, 0);
    for m in [&a, &b, &c] {
        assert_eq!(
            ledger_entries(&db, &m.aggregate_id).await,
            1,
            "{}",
            m.aggregate_id
        );
        assert_eq!(inbox_rows(&db, &m.event_id).await, 1, "{}", m.event_id);
    }
    assert_eq!(ledger_entries(&db, "pay_batch_declined").await, 0);

    // A batch with an effect the ledger refuses, and a body that is not an
    // event at all.
    ledger.broken.lock().unwrap().insert("pay_refused".into());
    let settled = Settled::default();
    let (ok_1, refused, ok_2) = (
        succeeded("pay_ok_1"),
        succeeded("pay_refused"),
        succeeded("pay_ok_2"),
    );
    let mut deliveries: Vec<Delivery> = [&ok_1, &refused, &ok_2]
        .iter()
        .map(|m| settled.delivery(&m.event_id, m.to_bytes()))
        .collect();
    deliveries.push(settled.delivery("evt_garbage", b"not an event".to_vec()));
    runner.handle_batch(deliveries).await;

    let mut expected = vec![
        (ok_1.event_id.clone(), "ack"),
        (ok_2.event_id.clone(), "ack"),
        (refused.event_id.clone(), "retry"),
        ("evt_garbage".to_owned(), "ack"),
    ];
    expected.sort();
    assert_eq!(settled.sorted(), expected);
    assert_eq!(ledger_entries(&db, "pay_ok_1").await, 1);
    assert_eq!(ledger_entries(&db, "pay_ok_2").await, 1);
    assert_eq!(ledger_entries(&db, "pay_refused").await, 0);
    assert_eq!(
        inbox_rows(&db, &refused.event_id).await,
        0,
        "nothing of the refused one stays"
    );
    let (_, status, _, _) = dead_letter_status(&db, "evt_garbage")
        .await
        .expect("the undecodable body is parked");
    assert_eq!(status, "DEAD");
    harness.stop().await;
}

fn once_cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(ONCE)
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .expect("run once")
}

async fn dead_letter_status(db: &TestDb, message_id: &str) -> Option<(i64, String, i64, String)> {
    let pool = db.pool().await;
    let row = sqlx::query(
        "SELECT id, status, attempts, last_error FROM dead_letters WHERE message_id = $1",
    )
    .bind(message_id)
    .fetch_optional(&pool.pool)
    .await
    .unwrap();
    pool.pool.close().await;
    row.map(|r| {
        (
            r.try_get(0).unwrap(),
            r.try_get(1).unwrap(),
            r.try_get(2).unwrap(),
            r.try_get(3).unwrap(),
        )
    })
}

async fn a_poison_message_is_dead_lettered_while_others_flow_and_redrives_once_fixed(
    backend: Backend,
    broker: BrokerKind,
) {
    let db = TestDb::new(backend).await;
    let config = events_config(broker);
    let _stream = StreamGuard(config.clone());
    let ledger = BuggyLedger::default();
    ledger.broken.lock().unwrap().insert("pay_poison".into());
    let harness = EventHarness::start(
        &db,
        &config,
        Overrides {
            consumers: Some(vec![Arc::new(ledger.clone())]),
            ..Overrides::default()
        },
    )
    .await;

    let poison = succeeded("pay_poison");
    let later: Vec<EventMessage> = (0..5).map(|i| succeeded(&format!("pay_ok_{i}"))).collect();
    let deliveries = std::iter::once(poison.clone())
        .chain(later.clone())
        .map(|m| {
            let config = config.clone();
            let events = harness.events.clone();
            tokio::spawn(async move { deliver(&config, &events, &m, 1).await })
        });
    // The later messages are processed while the poison one is retried.
    let pending = futures::future::join_all(deliveries);
    for m in &later {
        eventually(WAIT, || async {
            (ledger_entries(&db, &m.aggregate_id).await == 1).then_some(())
        })
        .await;
    }
    pending.await.into_iter().for_each(|r| r.unwrap());

    let (id, status, attempts, last_error) = eventually(WAIT, || async {
        dead_letter_status(&db, &poison.event_id).await
    })
    .await;
    assert_eq!(status, "DEAD");
    assert_eq!(attempts, 3, "dead-lettered after max_attempts deliveries");
    assert!(
        last_error.contains("account mapping missing"),
        "{last_error}"
    );
    assert_eq!(ledger_entries(&db, "pay_poison").await, 0);

    // Visible to the operator.
    let listed = once_cli(&[
        "events",
        "dead-letters",
        "--json",
        "--database-url",
        &db.url,
    ]);
    assert!(listed.status.success(), "{listed:?}");
    let listed = String::from_utf8(listed.stdout).unwrap();
    let letter: serde_json::Value = serde_json::from_str(listed.lines().next().unwrap()).unwrap();
    assert_eq!(letter["messageId"], poison.event_id.as_str());
    assert_eq!(letter["consumerName"], "ledger");

    // A redrive before the fix fails again and goes back to DEAD.
    let id_arg = id.to_string();
    let redrive = once_cli(&["events", "redrive", &id_arg, "--database-url", &db.url]);
    assert!(redrive.status.success(), "{redrive:?}");
    eventually(WAIT, || async {
        dead_letter_status(&db, &poison.event_id)
            .await
            .filter(|(_, status, attempts, _)| status == "DEAD" && *attempts == 4)
    })
    .await;

    // Fixed: the redrive writes the entry, once.
    ledger.broken.lock().unwrap().clear();
    let redrive = once_cli(&["events", "redrive", &id_arg, "--database-url", &db.url]);
    assert!(redrive.status.success(), "{redrive:?}");
    eventually(WAIT, || async {
        dead_letter_status(&db, &poison.event_id)
            .await
            .filter(|(_, status, _, _)| status == "REDRIVEN")
    })
    .await;
    assert_eq!(ledger_entries(&db, "pay_poison").await, 1);
    let again = once_cli(&["events", "redrive", &id_arg, "--database-url", &db.url]);
    assert!(
        !again.status.success(),
        "a redriven letter cannot be redriven twice"
    );

    // A late duplicate of the message changes nothing.
    deliver(&config, &harness.events, &poison, 1).await;
    eventually(WAIT, || async {
        (harness.metrics.consumed_count("ledger", "duplicate") >= 1).then_some(())
    })
    .await;
    assert_eq!(ledger_entries(&db, "pay_poison").await, 1);
    let duplicates = harness.metrics.consumed_count("ledger", "duplicate");
    match &config.nats_url {
        // The bus hands each message over once.
        None => assert_eq!(duplicates, 1),
        // JetStream redelivers a message whose ack came after the ack wait.
        Some(_) => assert!(duplicates >= 1, "{duplicates}"),
    }
    harness.stop().await;
}

/// A node in this process, built with the test's event settings.
struct EventNode {
    url: String,
    admin_url: String,
    client: reqwest::Client,
    running: Stoppable<anyhow::Error>,
}

impl EventNode {
    async fn spawn(db: &TestDb, events: &EventsConfig, sender: FakeEmailSender) -> Self {
        let mut config = test_config(db);
        config.events = events.clone();
        let keys = ApiKeys::from_plaintext_list(API_KEYS).unwrap();
        let app = Application::builder(config, keys)
            .email_sender(Arc::new(sender))
            .build()
            .await
            .expect("node builds");
        let url = format!("http://{}", app.address());
        let admin_url = format!("http://{}", app.admin_address());
        Self {
            url,
            admin_url,
            client: reqwest::Client::new(),
            running: Stoppable::spawn(|stopped| app.run_until(stopped)),
        }
    }

    async fn stop(self) {
        self.running.stop().await
    }
}

async fn a_payment_becomes_one_ledger_entry_and_one_receipt_email(
    backend: Backend,
    broker: BrokerKind,
) {
    let db = TestDb::new(backend).await;
    let config = events_config(broker);
    let _stream = StreamGuard(config.clone());
    let sender = FakeEmailSender::new();
    let node = EventNode::spawn(&db, &config, sender.clone()).await;

    let paid = send(post(
        &node.client,
        &node.url,
        ACME_KEY,
        Some("k-e2e"),
        &payment_body("acc_1", "25.00", "order-e2e"),
    ))
    .await;
    assert_eq!(paid.status, 201);
    let payment_id = paid.json()["id"].as_str().unwrap().to_owned();
    let declined = send(post(
        &node.client,
        &node.url,
        ACME_KEY,
        Some("k-e2e-declined"),
        &payment_body("acc_nofunds_1", "5.00", "order-e2e-declined"),
    ))
    .await;
    assert_eq!(declined.status, 402);

    eventually(WAIT, || async {
        (notifications(&db, &payment_id, "SENT").await == 1).then_some(())
    })
    .await;
    let pool = db.pool().await;
    let entry = sqlx::query(
        "SELECT entry_type, amount_minor, currency, tenant_id FROM ledger_entries WHERE source_payment_id = $1",
    )
    .bind(&payment_id)
    .fetch_all(&pool.pool)
    .await
    .unwrap();
    assert_eq!(entry.len(), 1, "one ledger entry");
    assert_eq!(
        entry[0].try_get::<String, _>(0).unwrap(),
        "PAYMENT_CAPTURED"
    );
    assert_eq!(entry[0].try_get::<i64, _>(1).unwrap(), 2500);
    assert_eq!(entry[0].try_get::<String, _>(2).unwrap(), "EUR");
    assert_eq!(entry[0].try_get::<String, _>(3).unwrap(), "acme");
    // Both events left the outbox; the declined one has no effects.
    eventually(WAIT, || async {
        let n: i64 = sqlx::query("SELECT COUNT(*) FROM outbox WHERE published_at IS NULL")
            .fetch_one(&pool.pool)
            .await
            .unwrap()
            .try_get(0)
            .unwrap();
        (n == 0).then_some(())
    })
    .await;
    let all_entries: i64 = sqlx::query("SELECT COUNT(*) FROM ledger_entries")
        .fetch_one(&pool.pool)
        .await
        .unwrap()
        .try_get(0)
        .unwrap();
    assert_eq!(all_entries, 1, "a declined payment books nothing");
    pool.pool.close().await;

    let delivered = sender.delivered();
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    let email = &delivered[&dedupe_key(&payment_id)];
    assert!(email.body.contains(&payment_id) && email.subject.contains("25.00 EUR"));

    let metrics = scrape(&node.client, &node.admin_url).await;
    assert!(metrics.contains("outbox_backlog "), "{metrics}");
    assert!(metrics.contains("outbox_publish_lag_seconds_bucket"));
    assert_eq!(
        metric(&node.client, &node.admin_url, "outbox_published_total").await,
        2.0
    );
    node.stop().await;
}

/// A broker that only records what is published to it, in order.
#[derive(Debug, Default)]
struct RecordingBroker {
    published: Mutex<Vec<String>>,
}

#[async_trait]
impl once_node::events::Broker for RecordingBroker {
    async fn publish(&self, batch: &[EventMessage]) -> Result<(), once_node::events::BrokerError> {
        let mut published = self.published.lock().unwrap();
        published.extend(batch.iter().map(|m| m.event_id.clone()));
        Ok(())
    }
    async fn subscribe(
        &self,
        _consumer: &str,
    ) -> Result<Box<dyn once_node::events::broker::Subscription>, once_node::events::BrokerError>
    {
        Err(once_node::events::BrokerError::Refused(
            "this broker only records publishes".into(),
        ))
    }
    fn kind(&self) -> &'static str {
        "recording"
    }
}

crate::on_every_backend!(publishers_publish_every_outbox_row_once_and_in_order);

/// PostgreSQL: two publisher replicas racing over 300 rows publish each row
/// exactly once (`FOR UPDATE SKIP LOCKED`). SQLite: its one publisher
/// publishes every row, in `seq` order.
async fn publishers_publish_every_outbox_row_once_and_in_order(backend: Backend) {
    let db = TestDb::new(backend).await;
    let database = Database::connect(&db.url, 8).await.unwrap();
    database.migrate().await.unwrap();
    for i in 0..300 {
        sqlx::query(
            "INSERT INTO outbox (event_id, event_type, schema_version, aggregate_id, tenant_id, payload, created_at) \
             VALUES ($1, 'payment.succeeded', 1, $2, 'acme', '{}', 0)",
        )
        .bind(format!("evt_{i:04}"))
        .bind(format!("pay_{i:04}"))
        .execute(&database.pool)
        .await
        .unwrap();
    }
    let broker = Arc::new(RecordingBroker::default());
    let config = EventsConfig {
        publish_batch: 16,
        ..EventsConfig::default()
    };
    let replicas = if backend == Backend::Postgres { 2 } else { 1 };
    let rounds = (0..replicas).map(|_| {
        let publisher = once_node::events::outbox::Publisher::new(
            database.clone(),
            broker.clone(),
            Arc::new(SystemClock),
            EventMetrics::unregistered(),
            &config,
        );
        tokio::spawn(async move {
            let mut published = 0;
            loop {
                match publisher.publish_round().await.expect("round") {
                    0 => return published,
                    n => published += n,
                }
            }
        })
    });
    let per_replica: Vec<usize> = futures::future::join_all(rounds)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(per_replica.iter().sum::<usize>(), 300, "{per_replica:?}");
    let published = broker.published.lock().unwrap().clone();
    let distinct: HashSet<&String> = published.iter().collect();
    assert_eq!(published.len(), 300, "no row published twice");
    assert_eq!(distinct.len(), 300);
    if replicas == 1 {
        let mut sorted = published.clone();
        sorted.sort();
        assert_eq!(published, sorted, "one publisher keeps seq order");
    }
    let unpublished: i64 = sqlx::query("SELECT COUNT(*) FROM outbox WHERE published_at IS NULL")
        .fetch_one(&database.pool)
        .await
        .unwrap()
        .try_get(0)
        .unwrap();
    assert_eq!(unpublished, 0);
    database.pool.close().await;
}

/// Crashes of the real `once node` process at the event path's failpoints.
#[cfg(feature = "failpoints")]
mod crashes {
    use crate::email_sink::EmailSink;

    use super::*;

    /// Sums `events_consumed_total{…outcome="OUTCOME"}` over consumers.
    /// Of the ledger and receipt-email consumers (the `webhooks` consumer
    /// has its own scenarios: tests/api/webhooks.rs).
    async fn consumed_total(client: &reqwest::Client, url: &str, outcome: &str) -> f64 {
        let label = format!("outcome=\"{outcome}\"");
        metric_sum(client, url, "events_consumed_total{", &label).await
            - metric_sum(
                client,
                url,
                "events_consumed_total{",
                &format!("consumer=\"webhooks\",{label}"),
            )
            .await
    }

    on_every_backend_and_broker!(
        a_consumer_killed_between_effect_and_ack_creates_nothing_new_on_redelivery,
        a_publisher_killed_between_publish_and_mark_changes_nothing_downstream,
        an_email_sender_killed_after_sending_resends_under_the_same_key_only,
    );

    fn node_args(config: &EventsConfig) -> Vec<&str> {
        let mut args = vec![
            "--events-stream",
            config.stream.as_str(),
            "--events-subject-prefix",
            config.subject_prefix.as_str(),
            "--consumer-ack-wait",
            "1s",
            "--consumer-instances",
            "4",
        ];
        if let Some(url) = &config.nats_url {
            args.extend(["--nats-url", url.as_str()]);
        }
        args
    }

    /// Pays once on a node armed with `failpoint`, waits for the abort, and
    /// returns the payment id.
    async fn pay_then_crash(db: &TestDb, args: &[&str], failpoint: &str) -> String {
        let client = reqwest::Client::new();
        let mut doomed = NodeProcess::start(db, args, &[("FAILPOINTS", failpoint)]).await;
        // The answer usually arrives: the crash is in a background worker.
        let answer = post(
            &client,
            &doomed.url,
            ACME_KEY,
            Some("k-crash"),
            &payment_body("acc_1", "25.00", "order-crash"),
        )
        .send()
        .await;
        let status = doomed.wait_for_exit().await;
        assert!(!status.success(), "the node aborted at {failpoint}");
        match answer {
            Ok(response) => {
                let answer = Answer::of(response).await;
                assert_eq!(answer.status, 201);
                answer.json()["id"].as_str().unwrap().to_owned()
            }
            Err(_) => {
                let pool = db.pool().await;
                let id: String = sqlx::query("SELECT id FROM payments")
                    .fetch_one(&pool.pool)
                    .await
                    .unwrap()
                    .try_get(0)
                    .unwrap();
                pool.pool.close().await;
                id
            }
        }
    }

    async fn event_id_of(db: &TestDb, payment_id: &str) -> String {
        let pool = db.pool().await;
        let id: String = sqlx::query("SELECT event_id FROM outbox WHERE aggregate_id = $1")
            .bind(payment_id)
            .fetch_one(&pool.pool)
            .await
            .unwrap()
            .try_get(0)
            .unwrap();
        pool.pool.close().await;
        id
    }

    /// The node's event consumers: ledger, receipt email, webhooks.
    const CONSUMERS: i64 = 3;

    async fn every_consumers_inbox_rows(db: &TestDb, message_id: &str) -> i64 {
        count(
            db,
            "SELECT COUNT(*) FROM consumer_inbox WHERE message_id = $1",
            message_id,
        )
        .await
    }

    async fn consumed_by_every_consumer(client: &reqwest::Client, url: &str, outcome: &str) -> f64 {
        metric_sum(
            client,
            url,
            "events_consumed_total{",
            &format!("outcome=\"{outcome}\""),
        )
        .await
    }

    async fn a_consumer_killed_between_effect_and_ack_creates_nothing_new_on_redelivery(
        backend: Backend,
        broker: BrokerKind,
    ) {
        let db = TestDb::new(backend).await;
        let config = events_config(broker);
        let _stream = StreamGuard(config.clone());
        let args = node_args(&config);
        let payment_id = pay_then_crash(&db, &args, "after_consume=return").await;
        let event_id = event_id_of(&db, &payment_id).await;
        // The first consumer to commit aborted the process before acking
        // (the webhooks consumer included: the failpoint is every
        // consumer's); the others may have committed in the same instant.
        let committed = every_consumers_inbox_rows(&db, &event_id).await;
        assert!(
            (1..=CONSUMERS).contains(&committed),
            "a consumer committed its effect and inbox row, then died before acking"
        );

        let node = NodeProcess::start(&db, &args, &[]).await;
        let client = reqwest::Client::new();
        // The unacknowledged message comes back (NATS: after the ack wait;
        // bus: the outbox row was never marked, so it is published again)
        // and the inbox turns it into a no-op for each consumer that had
        // committed.
        eventually(WAIT, || async {
            (consumed_by_every_consumer(&client, &node.admin_url, "duplicate").await
                >= committed as f64)
                .then_some(())
        })
        .await;
        eventually(WAIT, || async {
            (notifications(&db, &payment_id, "SENT").await == 1).then_some(())
        })
        .await;
        // The consumers are independent: wait for every one's effect.
        eventually(WAIT, || async {
            (ledger_entries(&db, &payment_id).await == 1
                && every_consumers_inbox_rows(&db, &event_id).await == CONSUMERS)
                .then_some(())
        })
        .await;
        assert_eq!(
            consumed_by_every_consumer(&client, &node.admin_url, "processed").await,
            (CONSUMERS - committed) as f64,
            "after the restart only a consumer that had not committed wrote anything"
        );
        let duplicates = consumed_by_every_consumer(&client, &node.admin_url, "duplicate").await;
        match &config.nats_url {
            // The bus publishes the row again once: one copy per consumer.
            None => assert_eq!(duplicates, committed as f64),
            // JetStream redelivers a message whose ack came after the 1 s ack wait.
            Some(_) => assert!(duplicates >= committed as f64, "{duplicates}"),
        }
        node.kill().await;
    }

    async fn a_publisher_killed_between_publish_and_mark_changes_nothing_downstream(
        backend: Backend,
        broker: BrokerKind,
    ) {
        let db = TestDb::new(backend).await;
        let config = events_config(broker);
        let _stream = StreamGuard(config.clone());
        let args = node_args(&config);
        let payment_id = pay_then_crash(&db, &args, "after_publish=return").await;
        let event_id = event_id_of(&db, &payment_id).await;
        assert_eq!(
            count(
                &db,
                "SELECT COUNT(*) FROM outbox WHERE event_id = $1 AND published_at IS NULL",
                &event_id
            )
            .await,
            1,
            "published, never marked"
        );

        let node = NodeProcess::start(&db, &args, &[]).await;
        eventually(WAIT, || async {
            (count(
                &db,
                "SELECT COUNT(*) FROM outbox WHERE event_id = $1 AND published_at IS NOT NULL",
                &event_id,
            )
            .await
                == 1)
                .then_some(())
        })
        .await;
        eventually(WAIT, || async {
            (notifications(&db, &payment_id, "SENT").await == 1).then_some(())
        })
        .await;
        // The two consumers are independent: wait for the ledger's effect too.
        eventually(WAIT, || async {
            (ledger_entries(&db, &payment_id).await == 1 && inbox_rows(&db, &event_id).await == 2)
                .then_some(())
        })
        .await;
        let client = reqwest::Client::new();
        match &config.nats_url {
            Some(url) => {
                // JetStream dropped the second publish (same Nats-Msg-Id).
                let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
                let mut stream = js.get_stream(&config.stream).await.unwrap();
                assert_eq!(stream.info().await.unwrap().state.messages, 1);
            }
            None => {
                // The bus delivered twice; both consumers' inboxes dropped
                // the second copy.
                assert_eq!(
                    consumed_total(&client, &node.admin_url, "duplicate").await,
                    2.0
                );
                assert_eq!(
                    consumed_total(&client, &node.admin_url, "processed").await,
                    0.0
                );
            }
        }
        node.kill().await;
    }

    async fn an_email_sender_killed_after_sending_resends_under_the_same_key_only(
        backend: Backend,
        broker: BrokerKind,
    ) {
        let db = TestDb::new(backend).await;
        let config = events_config(broker);
        let _stream = StreamGuard(config.clone());
        let sink = EmailSink::start("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let mut args = node_args(&config);
        args.extend(["--email-sink-url", sink.url.as_str()]);
        let payment_id = pay_then_crash(&db, &args, "after_email_send=return").await;
        assert_eq!(sink.received().len(), 1, "sent once before the crash");
        assert_eq!(
            notifications(&db, &payment_id, "PENDING").await,
            1,
            "never marked sent"
        );

        let node = NodeProcess::start(&db, &args, &[]).await;
        eventually(WAIT, || async {
            (notifications(&db, &payment_id, "SENT").await == 1).then_some(())
        })
        .await;
        let received = sink.received();
        let key = dedupe_key(&payment_id);
        assert_eq!(
            received.len(),
            2,
            "the unmarked notification was sent again"
        );
        assert!(
            received.iter().all(|r| r.token == key),
            "every send carries the same dedupe key: {received:?}"
        );
        assert_eq!(
            received.iter().map(|r| r.delivered).collect::<Vec<_>>(),
            [true, false],
            "the sink delivered the first and dropped the resend as a duplicate"
        );
        assert_eq!(sink.delivered().len(), 1, "one email reached the customer");
        node.kill().await;
        sink.stop();
    }
}

/// Hands the test's deliveries to a consumer, counting those it took.
#[derive(Debug)]
struct Handed {
    deliveries: tokio::sync::mpsc::UnboundedReceiver<Delivery>,
    taken: Arc<AtomicUsize>,
}

#[async_trait]
impl Subscription for Handed {
    async fn next(&mut self) -> Result<Delivery, BrokerError> {
        let delivery = self.deliveries.recv().await.ok_or(BrokerError::Closed)?;
        self.taken.fetch_add(1, Ordering::SeqCst);
        Ok(delivery)
    }
}

/// A ledger consumer the test feeds one delivery at a time, on an events
/// database whose group commit the test holds: a writer has taken the first
/// of two jobs of the test's own and waits, the second stays queued, and so
/// does every batch the consumer starts, until [`HeldConsumer::release`].
struct HeldConsumer {
    harness: EventHarness,
    batches: once_node::sql::group_commit::GroupCommit,
    /// Jobs the group commit had run when the test began.
    jobs_before: u64,
    send: tokio::sync::mpsc::UnboundedSender<Delivery>,
    taken: Arc<AtomicUsize>,
    settled: Settled,
    stop: watch::Sender<bool>,
    running: tokio::task::JoinHandle<()>,
    /// Dropping it lets the held writer go on.
    release: Option<tokio::sync::oneshot::Sender<()>>,
    ours: Vec<tokio::task::JoinHandle<Result<(), once_node::sql::group_commit::BatchFailed>>>,
}

impl HeldConsumer {
    async fn start(db: &TestDb) -> Self {
        let config = events_config(BrokerKind::InProcess);
        // No consumers of the harness's own: the test runs the one it watches.
        let overrides = Overrides {
            consumers: Some(Vec::new()),
            ..Overrides::default()
        };
        let harness = EventHarness::start(db, &config, overrides).await;
        let (send, deliveries) = tokio::sync::mpsc::unbounded_channel();
        let taken = Arc::new(AtomicUsize::new(0));
        let subscription = Handed {
            deliveries,
            taken: taken.clone(),
        };
        let (stop, stopped) = watch::channel(false);
        let runner = harness.events.runner(Arc::new(LedgerConsumer));
        let running = tokio::spawn(runner.run(Some(Box::new(subscription)), stopped));
        let batches = harness.events.db.batches().clone();
        let jobs_before = batches.stats().jobs;
        let (held_send, held) = tokio::sync::oneshot::channel();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let holder = batches.clone();
        tokio::spawn(async move {
            let _held = holder.hold().await;
            let _ = held_send.send(());
            let _ = released.await;
        });
        held.await.expect("the group commit is held");
        let nothing = || {
            let batches = batches.clone();
            tokio::spawn(async move {
                batches
                    .run::<(), once_node::sql::group_commit::BatchFailed>(Box::new(|_| {
                        Box::pin(async { Ok(()) })
                    }))
                    .await
            })
        };
        let ours = vec![nothing(), nothing()];
        eventually(WAIT, || async { (batches.queued() == 1).then_some(()) }).await;
        Self {
            harness,
            batches,
            jobs_before,
            send,
            taken,
            settled: Settled::default(),
            stop,
            running,
            release: Some(release),
            ours,
        }
    }

    /// Hands over a success event of `payment` and waits until the consumer
    /// has taken it.
    async fn hand(&self, payment: &str) {
        let message = succeeded(payment);
        let before = self.taken.load(Ordering::SeqCst);
        self.send
            .send(self.settled.delivery(&message.event_id, message.to_bytes()))
            .unwrap();
        eventually(WAIT, || async {
            (self.taken.load(Ordering::SeqCst) == before + 1).then_some(())
        })
        .await;
    }

    /// Hands over the first delivery, and waits until the batch the consumer
    /// starts for it queues behind the test's second job.
    async fn hand_first(&self, payment: &str) {
        self.hand(payment).await;
        let batches = &self.batches;
        eventually(WAIT, || async { (batches.queued() == 2).then_some(()) }).await;
    }

    /// Lets the group commit go on, and waits for the test's own jobs.
    async fn release(&mut self) {
        drop(self.release.take());
        for job in self.ours.drain(..) {
            job.await.unwrap().expect("the test's own jobs commit");
        }
    }

    fn acks(&self) -> usize {
        let settled = self.settled.sorted();
        settled.iter().filter(|(_, how)| *how == "ack").count()
    }

    /// Jobs the group commit ran since the test began.
    fn jobs(&self) -> u64 {
        self.batches.stats().jobs - self.jobs_before
    }
}

/// A consumer starts a batch when none of its batches is in flight (or a
/// whole batch waits): deliveries that arrive while one commits gather into
/// the next, so under load it writes a few large batches, not one per
/// delivery (decision 0051).
async fn deliveries_that_arrive_while_a_batch_commits_gather_into_the_next(backend: Backend) {
    let db = TestDb::new(backend).await;
    let mut consumer = HeldConsumer::start(&db).await;
    let payments: Vec<String> = (0..9).map(|i| format!("pay_gather_{i}")).collect();
    consumer.hand_first(&payments[0]).await;
    // Eight more, one after another, each taken by the consumer while its
    // first batch waits on the held commit. (Handling each as a batch of its
    // own, it would stop taking them at four batches in flight.)
    for payment in &payments[1..] {
        consumer.hand(payment).await;
    }
    assert_eq!(
        consumer.batches.queued(),
        2,
        "no batch started while one was in flight"
    );
    consumer.release().await;
    eventually(WAIT, || async { (consumer.acks() == 9).then_some(()) }).await;
    for payment in &payments {
        assert_eq!(ledger_entries(&db, payment).await, 1, "{payment}");
    }
    // The test's two jobs, the first delivery's batch, and one batch for
    // the eight that arrived while it waited.
    assert_eq!(consumer.jobs(), 4);
    let _ = consumer.stop.send(true);
    consumer.running.await.unwrap();
    consumer.harness.stop().await;
}

/// A consumer told to stop (a deploy) first finishes what it took: the
/// batch in flight and the deliveries waiting behind it are written and
/// acknowledged, not left to the broker's redelivery timeout.
async fn a_consumer_that_stops_finishes_the_deliveries_it_took(backend: Backend) {
    let db = TestDb::new(backend).await;
    let mut consumer = HeldConsumer::start(&db).await;
    let payments: Vec<String> = (0..3).map(|i| format!("pay_stop_{i}")).collect();
    consumer.hand_first(&payments[0]).await;
    consumer.hand(&payments[1]).await;
    consumer.hand(&payments[2]).await;
    let _ = consumer.stop.send(true);
    // The batch in flight cannot commit yet; the waiting two join the queue.
    let batches = &consumer.batches;
    eventually(WAIT, || async { (batches.queued() == 3).then_some(()) }).await;
    assert!(!consumer.running.is_finished(), "it waits for its batches");
    assert_eq!(consumer.acks(), 0);
    consumer.release().await;
    (&mut consumer.running).await.unwrap();
    assert_eq!(consumer.acks(), 3, "{:?}", consumer.settled.sorted());
    for payment in &payments {
        assert_eq!(ledger_entries(&db, payment).await, 1, "{payment}");
    }
    assert_eq!(consumer.jobs(), 4);
    consumer.harness.stop().await;
}
