-- 0006 task parent count: how many tasks a task was created to wait for
-- (immutable), so that a claim hands the results of its parents to a task
-- created with dependsOn as to a workflow's step, and reads nothing for the
-- others.
ALTER TABLE tasks ADD COLUMN parent_count integer NOT NULL DEFAULT (0);
