-- 0012 schedule workflow, down: schedules create tasks only.
DROP INDEX workflow_schedule_id_schedule_slot;
ALTER TABLE workflows DROP COLUMN schedule_slot;
ALTER TABLE workflows DROP COLUMN schedule_id;
ALTER TABLE schedules DROP COLUMN last_workflow_id;
ALTER TABLE schedules DROP COLUMN workflow_sealed;
ALTER TABLE schedules DROP COLUMN workflow;
