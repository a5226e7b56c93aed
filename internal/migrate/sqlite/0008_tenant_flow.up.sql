-- 0008 tenant flow: a tenant's share of a task type held back by its own
-- controls (a pause, caps on running and waiting, a rate), who paused a
-- type, and the tenant of each instance, which the claim reads a held-back
-- type's waiting instances by.
ALTER TABLE task_instances ADD COLUMN tenant text NOT NULL DEFAULT ('');
UPDATE task_instances SET tenant = (SELECT t.tenant FROM tasks t WHERE t.id = task_instances.task_id)
WHERE EXISTS (SELECT 1 FROM tasks t WHERE t.id = task_instances.task_id AND t.tenant <> '');
CREATE INDEX taskinstance_tenant_claimable ON task_instances (task_type, tenant, priority, run_at, id) WHERE status IN ('PENDING', 'RETRY_PENDING');

ALTER TABLE flow_controls ADD COLUMN paused_by text NOT NULL DEFAULT ('');
ALTER TABLE flow_controls ADD COLUMN paused_by_platform bool NOT NULL DEFAULT (false);

CREATE TABLE tenant_flow_controls (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    task_type text NOT NULL,
    tenant text NOT NULL,
    max_running integer NULL,
    max_waiting integer NULL,
    rate_limit integer NULL,
    rate_period_seconds integer NOT NULL DEFAULT (1),
    paused bool NOT NULL DEFAULT (false),
    paused_until datetime NULL,
    paused_by text NOT NULL DEFAULT (''),
    paused_by_platform bool NOT NULL DEFAULT (false),
    updated_by text NOT NULL DEFAULT (''),
    updated_at datetime NOT NULL
);
CREATE UNIQUE INDEX tenantflowcontrol_task_type_tenant ON tenant_flow_controls (task_type, tenant);

CREATE TABLE tenant_flow_starts (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    task_type text NOT NULL,
    tenant text NOT NULL,
    started_at datetime NOT NULL,
    admitted_at datetime NULL,
    count integer NOT NULL
);
CREATE INDEX tenantflowstart_task_type_tenant_started_at ON tenant_flow_starts (task_type, tenant, started_at);
-- Their ids start in ranges of their own (ent's global ids).
INSERT INTO sqlite_sequence (name, seq) VALUES ('tenant_flow_controls', 90194313216), ('tenant_flow_starts', 107374182400);
