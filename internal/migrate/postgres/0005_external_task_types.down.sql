-- 0005 external task types, down: the declared types go, with their rows.
DROP TABLE external_task_types;
