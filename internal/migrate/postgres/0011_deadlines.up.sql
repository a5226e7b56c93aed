-- 0011 deadlines: a task may have to finish by an absolute time (its
-- deadline). The deadlines loop flags it at risk, then missed, once each
-- (the timestamps say when); a finish records whether it was met. These are
-- flags, not states of the lifecycle. The partial index holds only the
-- tasks still open against their deadline, so the loop's cost does not grow
-- with history; its predicate names no column a transition without a
-- deadline changes, so such updates stay HOT.
ALTER TABLE tasks ADD COLUMN deadline timestamptz;
ALTER TABLE tasks ADD COLUMN deadline_at_risk_at timestamptz;
ALTER TABLE tasks ADD COLUMN deadline_missed_at timestamptz;
ALTER TABLE tasks ADD COLUMN deadline_met_at timestamptz;
CREATE INDEX task_deadline_open ON tasks (deadline) WHERE deadline IS NOT NULL AND deadline_missed_at IS NULL AND deadline_met_at IS NULL;
