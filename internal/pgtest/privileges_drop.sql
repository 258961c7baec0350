-- pgtest.LeastPrivilegeURLs, when its test ends: roles belong to the cluster, not to the test's
-- database, so the test drops them, and first what they were granted in that database.
DROP OWNED BY pgadmit_gateway_login, pgadmit_maintenance_login, pgadmit_gateway, pgadmit_maintenance;
DROP ROLE pgadmit_gateway_login, pgadmit_maintenance_login, pgadmit_gateway, pgadmit_maintenance;
