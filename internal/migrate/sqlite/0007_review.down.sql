DROP TABLE task_input_versions;
DROP TABLE task_reviews;
ALTER TABLE external_task_types DROP COLUMN review_policy;
ALTER TABLE tasks DROP COLUMN review_mode;
ALTER TABLE tasks DROP COLUMN input_version;
