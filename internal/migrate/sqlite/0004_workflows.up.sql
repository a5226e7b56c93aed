-- 0004 workflows: tasks that wait for other tasks (lifecycle's
-- WAITING_DEPENDENCY), the edges between them and the workflows that group
-- them.

ALTER TABLE tasks ADD COLUMN workflow_id integer NULL;
ALTER TABLE tasks ADD COLUMN step_key text NULL;
ALTER TABLE task_instances ADD COLUMN waiting_on integer NOT NULL DEFAULT (0);
CREATE UNIQUE INDEX task_workflow_id_step_key ON tasks (workflow_id, step_key) WHERE workflow_id IS NOT NULL;

CREATE TABLE task_dependencies (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    parent_id integer NOT NULL,
    child_id integer NOT NULL,
    on_parent_failure text NOT NULL DEFAULT ('CANCEL_DEPENDENTS')
);
CREATE UNIQUE INDEX taskdependency_parent_id_child_id ON task_dependencies (parent_id, child_id);
CREATE INDEX taskdependency_child_id ON task_dependencies (child_id);

CREATE TABLE workflows (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    code text NOT NULL,
    title text NOT NULL DEFAULT (''),
    idempotency_key text NULL,
    idempotency_hash text NULL,
    input_hash text NOT NULL,
    owner text NOT NULL,
    owner_source text NOT NULL DEFAULT (''),
    tenant text NOT NULL DEFAULT (''),
    owner_role text NOT NULL DEFAULT (''),
    on_parent_failure text NOT NULL DEFAULT ('CANCEL_DEPENDENTS'),
    step_count integer NOT NULL
);
CREATE UNIQUE INDEX workflows_code_key ON workflows (code);
CREATE UNIQUE INDEX workflow_idempotency_hash ON workflows (idempotency_hash) WHERE idempotency_hash IS NOT NULL;
CREATE INDEX workflow_created_at ON workflows (created_at);

-- Each table's ids start in a range of their own (ent's global ids).
INSERT INTO sqlite_sequence (name, seq) VALUES
    ('task_dependencies', 68719476736),
    ('workflows', 73014444032);
