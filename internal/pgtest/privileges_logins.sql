-- pgtest.LeastPrivilegeURLs: one login role in each group of docs/privileges.sql (the
-- test gives the four roles names of their own before it runs this).
CREATE ROLE pgadmit_gateway_login LOGIN PASSWORD 'pgadmit-test' IN ROLE pgadmit_gateway;
CREATE ROLE pgadmit_maintenance_login LOGIN PASSWORD 'pgadmit-test' IN ROLE pgadmit_maintenance;
