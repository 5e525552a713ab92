-- Each consumer's redriver asks, every round, for its own letters an
-- operator asked to run again. Keyed by id alone, the partial index left the
-- planner a choice between it and the (consumer, message) constraint, and
-- SQLite took the constraint: every dead letter of the consumer read each
-- round. Keyed by consumer first, it serves that query exactly
-- (tests/api/query_plans.rs checks the plan on both dialects).
DROP INDEX dead_letters_redrive;
CREATE INDEX dead_letters_redrive ON dead_letters (consumer_name, id) WHERE status = 'REDRIVE_REQUESTED';
