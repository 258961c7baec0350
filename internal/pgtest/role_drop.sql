-- pgtest.NoGrantsURL, when its test ends: roles belong to the cluster, not to the test's
-- database, so the test drops its role, and first what it was granted in that database.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_roles AS x WHERE x.rolname = 'pgadmit_test_role') THEN
        DROP OWNED BY pgadmit_test_role;
        DROP ROLE pgadmit_test_role;
    END IF;
END
$$;
