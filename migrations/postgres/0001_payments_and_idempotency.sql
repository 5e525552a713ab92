-- The idempotency record (DESIGN §4), the payment it creates, and the outbox
-- row written in the same transaction as the payment's completion (DESIGN §7).
-- Times are unix epoch milliseconds and every integer is BIGINT, so both
-- dialects read them alike through one set of queries.

CREATE TABLE idempotency_requests (
    tenant_id               TEXT    NOT NULL,
    principal_id            TEXT    NOT NULL,
    operation               TEXT    NOT NULL,
    idempotency_key         TEXT    NOT NULL,
    fingerprint             TEXT    NOT NULL,
    fingerprint_version     BIGINT  NOT NULL,
    status                  TEXT    NOT NULL,
    step                    TEXT    NOT NULL,
    fence                   BIGINT  NOT NULL,
    locked_until            BIGINT  NOT NULL,
    payment_id              TEXT,
    provider_key            TEXT,
    response_status         BIGINT,
    response_headers        TEXT,
    response_body           BYTEA,
    response_schema_version BIGINT,
    error_code              TEXT,
    trace_id                TEXT,
    region                  TEXT    NOT NULL,
    takeovers               BIGINT  NOT NULL DEFAULT 0,
    created_at              BIGINT  NOT NULL,
    updated_at              BIGINT  NOT NULL,
    expires_at              BIGINT,
    purge_after             BIGINT,
    PRIMARY KEY (tenant_id, principal_id, operation, idempotency_key)
);

-- The recovery worker and the in-progress age gauge look for unfinished records.
CREATE INDEX idempotency_requests_unfinished
    ON idempotency_requests (locked_until)
    WHERE status IN ('IN_PROGRESS', 'UNKNOWN_REQUIRES_RECOVERY');
-- The sweeper expires finished records in small batches.
CREATE INDEX idempotency_requests_expiry
    ON idempotency_requests (expires_at)
    WHERE status IN ('COMPLETED', 'FAILED_REPLAYABLE', 'FAILED_RETRYABLE');
-- ... and later deletes their metadata.
CREATE INDEX idempotency_requests_purge
    ON idempotency_requests (purge_after)
    WHERE status = 'EXPIRED';

CREATE TABLE payments (
    id                  TEXT    PRIMARY KEY,
    tenant_id           TEXT    NOT NULL,
    account_id          TEXT    NOT NULL,
    merchant_reference  TEXT    NOT NULL,
    amount_minor        BIGINT  NOT NULL CHECK (amount_minor > 0),
    currency            TEXT    NOT NULL,
    channel             TEXT    NOT NULL,
    status              TEXT    NOT NULL,
    provider_key        TEXT    NOT NULL UNIQUE,
    provider_charge_id  TEXT,
    decline_code        TEXT,
    region              TEXT    NOT NULL,
    created_at          BIGINT  NOT NULL,
    updated_at          BIGINT  NOT NULL,
    -- The final backstop against a keyless duplicate (DESIGN §1 case 6).
    CONSTRAINT payments_business_key UNIQUE (tenant_id, account_id, merchant_reference)
);

CREATE TABLE outbox (
    seq             BIGSERIAL PRIMARY KEY,
    event_id        TEXT    NOT NULL UNIQUE,
    event_type      TEXT    NOT NULL,
    schema_version  BIGINT  NOT NULL,
    aggregate_id    TEXT    NOT NULL,
    tenant_id       TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    created_at      BIGINT  NOT NULL,
    published_at    BIGINT
);

CREATE INDEX outbox_unpublished ON outbox (seq) WHERE published_at IS NULL;
