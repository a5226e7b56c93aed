DROP INDEX IF EXISTS task_deadline_open;
ALTER TABLE tasks DROP COLUMN deadline_met_at;
ALTER TABLE tasks DROP COLUMN deadline_missed_at;
ALTER TABLE tasks DROP COLUMN deadline_at_risk_at;
ALTER TABLE tasks DROP COLUMN deadline;
