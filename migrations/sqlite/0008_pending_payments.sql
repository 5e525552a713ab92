-- In the raft store mode a payment's row is settled after its record is
-- finished in raft-store, and a pass of the recovery worker looks for rows
-- left pending behind finished records (decision 0053). Pending rows are few
-- whatever the size of the table: a partial index serves that keyset scan.
CREATE INDEX payments_pending ON payments (created_at, id) WHERE status = 'pending';
