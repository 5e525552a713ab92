-- The consuming side of the event path (DESIGN §7, docs/events.md): the
-- inbox that makes each consumer idempotent, the consumers' own effects, and
-- the dead letters of messages that kept failing. Times are epoch millis.

-- One row per (consumer, message) that reached a final state. It is written
-- in the same transaction as the consumer's effect, so "in the inbox" means
-- "the effect exists" (status PROCESSED) or "parked" (DEAD_LETTERED).
CREATE TABLE consumer_inbox (
    consumer_name   TEXT    NOT NULL,
    message_id      TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    processed_at    BIGINT  NOT NULL,
    error_code      TEXT,
    CONSTRAINT consumer_inbox_message UNIQUE (consumer_name, message_id)
);

-- The ledger consumer's effect: at most one entry of a type per payment,
-- whatever happens to the messages that carry it.
CREATE TABLE ledger_entries (
    seq                 BIGSERIAL PRIMARY KEY,
    entry_type          TEXT    NOT NULL,
    source_payment_id   TEXT    NOT NULL,
    source_event_id     TEXT    NOT NULL,
    tenant_id           TEXT    NOT NULL,
    account_id          TEXT    NOT NULL,
    amount_minor        BIGINT  NOT NULL,
    currency            TEXT    NOT NULL,
    created_at          BIGINT  NOT NULL,
    CONSTRAINT ledger_entries_source UNIQUE (entry_type, source_payment_id)
);

-- The receipt-email consumer's effect: a notification to send. The sender
-- worker reads PENDING rows and sends each with dedupe_key as the message's
-- idempotency token, so a resend after a crash is the same email.
CREATE TABLE email_notifications (
    seq             BIGSERIAL PRIMARY KEY,
    dedupe_key      TEXT    NOT NULL UNIQUE,
    payment_id      TEXT    NOT NULL,
    tenant_id       TEXT    NOT NULL,
    recipient       TEXT    NOT NULL,
    subject         TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    attempts        BIGINT  NOT NULL DEFAULT 0,
    last_error      TEXT,
    created_at      BIGINT  NOT NULL,
    sent_at         BIGINT
);

CREATE INDEX email_notifications_pending ON email_notifications (seq) WHERE status = 'PENDING';

-- Messages a consumer gave up on after its attempts ran out, with the last
-- error. `once events redrive ID` asks the node to run one again.
CREATE TABLE dead_letters (
    id                  BIGSERIAL PRIMARY KEY,
    consumer_name       TEXT    NOT NULL,
    message_id          TEXT    NOT NULL,
    event_type          TEXT    NOT NULL,
    message             TEXT    NOT NULL,
    attempts            BIGINT  NOT NULL,
    last_error          TEXT    NOT NULL,
    status              TEXT    NOT NULL,
    created_at          BIGINT  NOT NULL,
    redrive_requested_at BIGINT,
    redriven_at         BIGINT,
    CONSTRAINT dead_letters_message UNIQUE (consumer_name, message_id)
);

CREATE INDEX dead_letters_redrive ON dead_letters (id) WHERE status = 'REDRIVE_REQUESTED';
