-- pgtest.LeastPrivilegeURLs, when its test ends: roles belong to the cluster, not to the test's
-- database, so the test drops them, and first what they were granted in that database. It drops
-- those that exist: a docs/privileges.sql that failed halfway created only some of them.
DO $$
DECLARE
    r text;
    roles text[] := ARRAY['pgadmit_gateway_login', 'pgadmit_maintenance_login', 'pgadmit_gateway', 'pgadmit_maintenance'];
BEGIN
    FOREACH r IN ARRAY roles LOOP
        IF EXISTS (SELECT FROM pg_catalog.pg_roles AS x WHERE x.rolname = r) THEN
            EXECUTE format('DROP OWNED BY %I', r);
        END IF;
    END LOOP;
    FOREACH r IN ARRAY roles LOOP
        EXECUTE format('DROP ROLE IF EXISTS %I', r);
    END LOOP;
END
$$;
