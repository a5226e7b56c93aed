-- 0002 is another branch's migration (workflows); this placeholder only keeps
-- the numbers without gaps on the workers branch. The merger drops it.
SELECT 1;
