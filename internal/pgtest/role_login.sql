-- pgtest.NoGrantsURL: a login role of the test's own with no grant of any kind (the test gives
-- it a name of its own, pgadmit_test_<suffix>, before it runs this): what a role the DBA forgot
-- in docs/privileges.sql may do, which is what PUBLIC may.
CREATE ROLE pgadmit_test_role LOGIN PASSWORD 'pgadmit-test';
