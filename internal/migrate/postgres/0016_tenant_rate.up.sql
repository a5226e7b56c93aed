-- 0016 tenant rate: a tenant's quota may limit its starts of every type to
-- rate_limit in any window of rate_period_seconds. Its starts are kept in
-- tenant_flow_starts under the task type '' (no task type is named so).
ALTER TABLE tenant_quotas ADD COLUMN rate_limit bigint;
ALTER TABLE tenant_quotas ADD COLUMN rate_period_seconds bigint NOT NULL DEFAULT 1;
