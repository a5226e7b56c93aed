-- 0008 tenant flow, down: the tenants' controls and starts go, with who
-- paused a type and the instances' tenant.
DROP TABLE tenant_flow_starts;
DROP TABLE tenant_flow_controls;
DELETE FROM sqlite_sequence WHERE name IN ('tenant_flow_controls', 'tenant_flow_starts');
ALTER TABLE flow_controls DROP COLUMN paused_by_platform;
ALTER TABLE flow_controls DROP COLUMN paused_by;
DROP INDEX taskinstance_tenant_claimable;
ALTER TABLE task_instances DROP COLUMN tenant;
