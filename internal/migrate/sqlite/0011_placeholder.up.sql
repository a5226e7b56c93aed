-- placeholder (dropped at merge): another branch owns this number.
SELECT 1;
