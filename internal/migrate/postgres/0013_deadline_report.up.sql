-- 0013 deadline report: every task with a deadline by its deadline (the
-- on-time report's range) and the missed ones by when (the DEADLINE_MISSED
-- alert's window), both partial so that tasks without a deadline cost
-- nothing; a schedule may give each fire's task a deadline (a time of day
-- in its timezone after the slot, or a number of seconds after it).
CREATE INDEX task_deadline ON tasks (deadline) WHERE deadline IS NOT NULL;
CREATE INDEX task_deadline_missed ON tasks (deadline_missed_at) WHERE deadline_missed_at IS NOT NULL;
ALTER TABLE schedules ADD COLUMN finish_by varchar NOT NULL DEFAULT '';
ALTER TABLE schedules ADD COLUMN finish_within_seconds bigint;
