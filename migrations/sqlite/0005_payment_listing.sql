-- `GET /payments` (docs/api.md): a tenant's payments in creation order,
-- `(created_at, id)`, resumed after a keyset cursor. One index for the
-- unfiltered and merchantReference-filtered listing, one for a listing by
-- account. The business key's unique index (tenant, account, merchant
-- reference) already answers an exact lookup by both.
CREATE INDEX payments_tenant_created ON payments (tenant_id, created_at, id);
CREATE INDEX payments_tenant_account_created ON payments (tenant_id, account_id, created_at, id);
