-- 0014 tenant quotas: what one tenant may hold at once across all its task
-- types (waiting instances, enabled schedules, how often a schedule fires),
-- set by platform administrators, and the index a create counts a tenant's
-- waiting instances through (up to the cap).
CREATE TABLE tenant_quotas (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    tenant text NOT NULL,
    max_waiting integer NULL,
    max_schedules integer NULL,
    min_schedule_interval_seconds integer NULL,
    updated_by text NOT NULL DEFAULT (''),
    updated_at datetime NOT NULL
);
CREATE UNIQUE INDEX tenant_quotas_tenant_key ON tenant_quotas (tenant);
CREATE INDEX taskinstance_tenant_waiting ON task_instances (tenant) WHERE status IN ('PENDING', 'RETRY_PENDING');
-- Its ids start in a range of their own (ent's global ids).
INSERT INTO sqlite_sequence (name, seq) VALUES ('tenant_quotas', 111669149696);
