-- 0015 fair share: a tenant's weight in the claim's fair share of a task
-- type several tenants wait for (1 unless its quota says otherwise).
ALTER TABLE tenant_quotas ADD COLUMN weight bigint NOT NULL DEFAULT 1;
