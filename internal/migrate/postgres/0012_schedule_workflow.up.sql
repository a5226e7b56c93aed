-- 0012 schedule workflow: a schedule may create a workflow at each slot
-- instead of a task (its definition, masked, and the unmasked one sealed;
-- the latest workflow it created, for its overlap policy), and a workflow
-- knows the schedule and slot that created it.
ALTER TABLE schedules ADD COLUMN workflow jsonb;
ALTER TABLE schedules ADD COLUMN workflow_sealed bytea;
ALTER TABLE schedules ADD COLUMN last_workflow_id bigint;
ALTER TABLE workflows ADD COLUMN schedule_id bigint;
ALTER TABLE workflows ADD COLUMN schedule_slot timestamptz;
CREATE INDEX workflow_schedule_id_schedule_slot ON workflows (schedule_id, schedule_slot) WHERE schedule_id IS NOT NULL;
