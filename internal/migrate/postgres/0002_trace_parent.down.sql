-- 0002 trace parent, down: tasks forget the traces that created them.
ALTER TABLE tasks DROP COLUMN trace_parent;
