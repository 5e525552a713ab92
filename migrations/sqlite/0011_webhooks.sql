-- Webhooks (DESIGN §11; decisions 0091 and 0092). Times are epoch millis.

-- A tenant's endpoints. `events` is a JSON array of event types, or ["*"].
-- The signing secrets are sealed with the node's data keys (decision 0031,
-- amended by 0092): `secret` signs; `previous_secret` still signs beside it
-- until `previous_expires_at` after a rotation. Deleting keeps the row
-- (`deleted_at`) so deliveries already fanned out to it can tell why they stop.
CREATE TABLE webhook_endpoints (
    id                  TEXT    PRIMARY KEY,
    tenant_id           TEXT    NOT NULL,
    url                 TEXT    NOT NULL,
    events              TEXT    NOT NULL,
    secret              BLOB    NOT NULL,
    previous_secret     BLOB,
    previous_expires_at BIGINT,
    created_at          BIGINT  NOT NULL,
    deleted_at          BIGINT
);

CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id, created_at) WHERE deleted_at IS NULL;

-- Every event the outbox published, written by the `webhooks` consumer (its
-- inbox dedupes a redelivery, the unique event id a second publish): the
-- source of the fan-out to endpoints and of `GET /events`.
CREATE TABLE webhook_events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT    NOT NULL UNIQUE,
    tenant_id       TEXT    NOT NULL,
    event_type      TEXT    NOT NULL,
    aggregate_id    TEXT    NOT NULL,
    data            TEXT    NOT NULL,
    created_at      BIGINT  NOT NULL,
    fanned_out_at   BIGINT
);

CREATE INDEX webhook_events_unfanned ON webhook_events (seq) WHERE fanned_out_at IS NULL;
CREATE INDEX webhook_events_tenant ON webhook_events (tenant_id, created_at, event_id);

-- One row per (event, endpoint). A delivery is claimed by moving its
-- `next_attempt_at` past the attempt's timeout and taking a fresh
-- `lease_token`: a node that dies mid-attempt leaves it due again once the
-- lease runs out, and its late answer no longer matches the token.
CREATE TABLE webhook_deliveries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT    NOT NULL,
    endpoint_id     TEXT    NOT NULL,
    tenant_id       TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    attempts        BIGINT  NOT NULL DEFAULT 0,
    next_attempt_at BIGINT  NOT NULL,
    lease_token     TEXT,
    retry_since     BIGINT  NOT NULL,
    last_error      TEXT,
    created_at      BIGINT  NOT NULL,
    delivered_at    BIGINT,
    CONSTRAINT webhook_deliveries_pair UNIQUE (event_id, endpoint_id)
);

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'PENDING';
