-- Encryption at rest (docs/decisions/0031-encryption-at-rest.md): a stored
-- answer (status, headers, body, schema version) is one sealed blob, opened
-- only by the node with its data keys. `sealed_with` is the id of the key
-- that sealed it (also readable from the blob's header): re-encryption
-- finds the rows an older key still guards, and `once keys status` counts
-- them per key. The plaintext columns go; answers stored before this
-- migration are dropped with them (no release has stored any).
ALTER TABLE idempotency_requests ADD COLUMN response_sealed BYTEA;
ALTER TABLE idempotency_requests ADD COLUMN sealed_with TEXT;
ALTER TABLE idempotency_requests DROP COLUMN response_status;
ALTER TABLE idempotency_requests DROP COLUMN response_headers;
ALTER TABLE idempotency_requests DROP COLUMN response_body;
ALTER TABLE idempotency_requests DROP COLUMN response_schema_version;
CREATE INDEX idempotency_requests_sealed_with
    ON idempotency_requests (sealed_with)
    WHERE sealed_with IS NOT NULL;
