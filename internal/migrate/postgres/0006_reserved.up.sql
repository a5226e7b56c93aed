-- 0006 reserved: a number given to another change made at the same time,
-- which replaces this file with its own when both are merged. It changes
-- nothing.
SELECT 1;
