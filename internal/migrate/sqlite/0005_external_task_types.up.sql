-- 0005 external task types: the task types an admin declared through the API
-- (declareTaskType), whose handlers run in workers outside the process and
-- claim over the worker protocol (/worker/v1/).
CREATE TABLE external_task_types (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    name text NOT NULL,
    description text NOT NULL DEFAULT (''),
    input_schema text NOT NULL,
    timeout_seconds integer NOT NULL,
    retry_policy text NOT NULL,
    stall_after_seconds integer NOT NULL DEFAULT (0),
    stall_action text NOT NULL DEFAULT ('FLAG'),
    updated_by text NOT NULL DEFAULT (''),
    updated_at datetime NOT NULL
);
CREATE UNIQUE INDEX external_task_types_name_key ON external_task_types (name);
-- Its ids start in a range of their own (ent's global ids).
INSERT INTO sqlite_sequence (name, seq) VALUES ('external_task_types', 77309411328);
