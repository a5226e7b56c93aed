-- 0015 fair share, down: the weights, the running caps and their index go.
DROP INDEX taskinstance_tenant_running;
ALTER TABLE tenant_quotas DROP COLUMN max_running;
ALTER TABLE tenant_quotas DROP COLUMN weight;
