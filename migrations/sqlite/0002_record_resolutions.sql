-- Operators' manual resolutions of operations whose provider outcome was
-- unknown: who decided what, when and why. Append-only.
CREATE TABLE record_resolutions (
    id              TEXT    PRIMARY KEY,
    tenant_id       TEXT    NOT NULL,
    principal_id    TEXT    NOT NULL,
    operation       TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    payment_id      TEXT,
    outcome         TEXT    NOT NULL CHECK (outcome IN ('charged', 'not-charged')),
    reason          TEXT    NOT NULL,
    actor           TEXT    NOT NULL,
    resolved_at     BIGINT  NOT NULL
);

CREATE INDEX record_resolutions_by_key ON record_resolutions (tenant_id, idempotency_key);
