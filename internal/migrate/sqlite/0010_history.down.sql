-- 0010 history, down: the task history goes.
DROP TABLE task_histories;
