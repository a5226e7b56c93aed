-- 0015 fair share, down: the weights go.
ALTER TABLE tenant_quotas DROP COLUMN weight;
