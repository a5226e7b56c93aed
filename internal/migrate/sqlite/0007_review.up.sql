-- 0007 review: tasks whose execution ended with a business failure wait
-- for a person (lifecycle's REVIEW_PENDING). task_reviews keeps each stop's
-- evidence and decision; task_input_versions keeps every input a task ran
-- with once it was edited (tasks.input is the current one, input_version
-- its number). tasks.review_mode is a task's own opt-in; an external
-- type's review policy is declared with it.
ALTER TABLE tasks ADD COLUMN input_version integer NOT NULL DEFAULT (1);
ALTER TABLE tasks ADD COLUMN review_mode text NULL;
ALTER TABLE external_task_types ADD COLUMN review_policy text NOT NULL DEFAULT ('');

CREATE TABLE task_reviews (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    task_id integer NOT NULL,
    instance_id integer NOT NULL,
    instance_no integer NOT NULL,
    trigger text NOT NULL,
    reason text NOT NULL,
    evidence json NULL,
    four_eyes bool NOT NULL DEFAULT (false),
    deadline datetime NULL,
    on_deadline text NULL,
    overdue_at datetime NULL,
    decision text NULL,
    decided_by text NULL,
    decided_by_source text NULL,
    decided_at datetime NULL,
    decision_reason text NULL,
    input_version integer NULL
);
CREATE UNIQUE INDEX taskreview_instance_id ON task_reviews (instance_id);
CREATE INDEX taskreview_task_id ON task_reviews (task_id);
CREATE INDEX taskreview_open_deadline ON task_reviews (deadline) WHERE decided_at IS NULL AND deadline IS NOT NULL AND overdue_at IS NULL;

CREATE TABLE task_input_versions (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    task_id integer NOT NULL,
    version integer NOT NULL,
    input json NOT NULL,
    input_sealed blob NULL,
    from_instance_no integer NOT NULL,
    author text NOT NULL,
    author_source text NOT NULL DEFAULT (''),
    reason text NOT NULL DEFAULT ('')
);
CREATE UNIQUE INDEX taskinputversion_task_id_version ON task_input_versions (task_id, version);

-- Each table's ids start in a range of their own (ent's global ids).
INSERT INTO sqlite_sequence (name, seq) VALUES
    ('task_reviews', 85899345920),
    ('task_input_versions', 103079215104);
