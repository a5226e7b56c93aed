-- 0014 tenant quotas, down: the quotas and their index go.
DROP INDEX taskinstance_tenant_waiting;
DROP TABLE tenant_quotas;
