-- The settling pass (raft mode, decision 0053) finds its rows by a column of
-- their own instead of by status (decision 0060). An index whose key or
-- predicate names `status` makes every finish's status change a non-HOT
-- update on PostgreSQL: a new heap tuple in another page and a new entry in
-- every index of `payments`. `settle_after` is set only by the raft mode's
-- insert and cleared by its settle; the sql mode never writes it, so its
-- finish changes no indexed column.
ALTER TABLE payments ADD COLUMN settle_after BIGINT;
UPDATE payments SET settle_after = created_at WHERE status = 'pending';
DROP INDEX payments_pending;
CREATE INDEX payments_unsettled ON payments (settle_after, id) WHERE settle_after IS NOT NULL;
