-- 0006 task parent count, down.
ALTER TABLE tasks DROP COLUMN parent_count;
