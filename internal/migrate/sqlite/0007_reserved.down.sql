-- 0007 reserved, down: nothing to undo.
SELECT 1;
