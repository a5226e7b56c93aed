-- 0004 workflows, down: drops the workflows and their edges, and the tasks'
-- columns that named them (a task still WAITING_DEPENDENCY is left so).

DROP TABLE workflows;
DROP TABLE task_dependencies;
DELETE FROM sqlite_sequence WHERE name IN ('task_dependencies', 'workflows');
DROP INDEX task_workflow_id_step_key;
ALTER TABLE task_instances DROP COLUMN waiting_on;
ALTER TABLE tasks DROP COLUMN step_key;
ALTER TABLE tasks DROP COLUMN workflow_id;
