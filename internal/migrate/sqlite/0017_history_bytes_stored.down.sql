-- 0017 history bytes stored, down: the column goes.
ALTER TABLE task_histories DROP COLUMN bytes_stored;
