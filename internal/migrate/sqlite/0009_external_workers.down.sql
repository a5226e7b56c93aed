-- 0009 external workers, down: the registry of workers goes.
DROP TABLE external_workers;
