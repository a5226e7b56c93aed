-- 0016 tenant rate, down: the quotas' rates and their starts go.
DELETE FROM tenant_flow_starts WHERE task_type = '';
ALTER TABLE tenant_quotas DROP COLUMN rate_period_seconds;
ALTER TABLE tenant_quotas DROP COLUMN rate_limit;
