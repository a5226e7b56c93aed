ALTER TABLE schedules DROP COLUMN finish_within_seconds;
ALTER TABLE schedules DROP COLUMN finish_by;
DROP INDEX IF EXISTS task_deadline_missed;
DROP INDEX IF EXISTS task_deadline;
