-- 0015 fair share: a tenant's weight in the claim's fair share of a task
-- type several tenants wait for (1 unless its quota says otherwise), its
-- cap on running instances of every type, and the index a claim counts a
-- tenant's running instances through (up to the cap).
ALTER TABLE tenant_quotas ADD COLUMN weight bigint NOT NULL DEFAULT 1;
ALTER TABLE tenant_quotas ADD COLUMN max_running bigint;
CREATE INDEX taskinstance_tenant_running ON task_instances (tenant) WHERE status = 'EXECUTING';
