//! The event path of DESIGN §7: what happens after a payment commits.
//!
//! The finish of a payment writes an outbox row in the payment's own
//! transaction (the node's `engine::execute` and `sql::finish`; the node
//! re-exports this crate as `once_node::events`). From there:
//!
//! ```text
//!  outbox ──► publisher ──► Broker (NATS JetStream | in-process bus) ──► consumer runner ─┬─► ledger_entries
//!  (rows)     claims rows,   dedupes on the event id                      inbox row + effect └─► email_notifications ─► sender ─► EmailSender
//!             marks published (Nats-Msg-Id)                               in one transaction,                          (token = dedupe key)
//!                                                                         then ack
//! ```
//!
//! Each hop is at-least-once and each receiver dedupes, so a crash anywhere
//! repeats work but never doubles an effect:
//!
//! - the publisher marks a row published only after the broker stored it; a
//!   crash in between publishes it again under the same event id, which the
//!   broker (JetStream's duplicate window) and then the inbox drop;
//! - a consumer writes its inbox row and its effect in one transaction and
//!   acknowledges only after that commits; a redelivery finds the inbox row;
//! - the effects themselves sit behind unique keys (`(entry_type,
//!   source_payment_id)`, `dedupe_key`), so even a second event for the same
//!   payment changes nothing;
//! - the email sender marks a notification sent only after the send, and
//!   every send carries the notification's dedupe key as its idempotency
//!   token, so a resend is the same email, deduplicated by the receiver.
//!
//! # Layout
//!
//! - [`config`]: the settings of the event path (one field of the node's
//!   `NodeConfig`).
//! - [`message`]: the versioned wire envelope and the payment event data.
//! - [`broker`]: the [`broker::Broker`] trait; [`nats`] and [`bus`] implement it.
//! - [`outbox`]: the publisher.
//! - [`inbox`]: the `consumer_inbox` table.
//! - [`consumer`]: the [`consumer::Consumer`] trait and the runner that
//!   receives, applies, retries, dead-letters and acknowledges.
//! - [`effect`]: a consumer's rows for a batch, written with their inbox
//!   rows in one query.
//! - [`ledger`], [`email`]: the two consumers, and the email sender worker.
//! - [`email_sender`]: the [`email_sender::EmailSender`] trait, its HTTP
//!   client and the fake. (The HTTP email sink the tests send to lives with
//!   the tests: `tests/api/email_sink.rs`.)
//! - [`dead_letters`]: parked messages, listing and redrive.
//! - [`webhook_events`]: the consumer that records every event for the
//!   node's webhook dispatcher and `GET /events`.
//! - [`metrics`]: [`EventMetrics`], which the node registers in its registry.
//! - [`runtime`]: wiring all of it into a node.
//!
//! The SQL of these tables lives next to the code that owns it rather than in
//! the node's `sql` module: each query serves exactly one worker here, over
//! the same `Any` pool and `$n` placeholders. The tables are in the shared
//! migrations (`/migrations`), one regional database.
//!
//! # Dependencies
//!
//! Below the node, never on it: [`once_domain`] (the clock, `UnixMillis`),
//! [`once_db`] (the regional database), [`once_failpoints`] (the crash points
//! `after_publish`, `after_consume`, `after_email_send`, armed by this
//! crate's `failpoints` feature) and `once_telemetry` (trace context).

pub mod broker;
pub mod bus;
pub mod config;
pub mod consumer;
pub mod dead_letters;
pub mod effect;
pub mod email;
pub mod email_sender;
pub mod inbox;
pub mod ledger;
pub mod message;
pub mod metrics;
pub mod nats;
pub mod outbox;
mod placeholders;
pub mod runtime;
pub mod webhook_events;

pub use broker::{Broker, BrokerError};
pub use config::EventsConfig;
pub use message::EventMessage;
pub use metrics::EventMetrics;
pub use runtime::{EventWorkers, Events};

/// The event path's round queries, each with the index that must serve it
/// ([`once_db::RoundQuery`]; checked by `tests/api/query_plans.rs`).
pub fn round_queries() -> Vec<once_db::RoundQuery> {
    use once_db::RoundQuery;
    vec![
        RoundQuery::new(
            "publisher round",
            outbox::SELECT_UNPUBLISHED,
            "outbox_unpublished",
        ),
        RoundQuery::new(
            "publisher backlog sample",
            outbox::SELECT_BACKLOG,
            "outbox_unpublished",
        ),
        RoundQuery::new(
            "email sender round",
            email::SELECT_PENDING,
            "email_notifications_pending",
        ),
        RoundQuery::new(
            "redriver round",
            dead_letters::select_redrive_requested(),
            "dead_letters_redrive",
        ),
    ]
}
