-- 0006 reserved: nothing to undo.
SELECT 1;
