-- 0006 reserved: a migration number held for work merged beside this one (it changes nothing).
SELECT 1;
