-- The trace context of the request that wrote the event, so the publisher
-- and the consumers continue the same trace (W3C traceparent).
ALTER TABLE outbox ADD COLUMN traceparent TEXT;
