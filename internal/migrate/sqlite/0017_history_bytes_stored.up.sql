-- 0017 history bytes stored: the bytes of artifacts (uploaded files, error
-- reports, exports, reports) written in a row's bucket by tasks of its type
-- and tenant, counted by the same flush as the executions.
ALTER TABLE task_histories ADD COLUMN bytes_stored integer NOT NULL DEFAULT (0);
