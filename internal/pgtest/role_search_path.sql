-- pgtest.SetRoleSearchPath: the search_path a role's sessions start with, set on the role, as
-- the README's "A schema of its own" does it (the test gives the role and the schema their
-- names before it runs this). The role's drop (role_drop.sql) removes the setting with it.
ALTER ROLE pgadmit_test_role SET search_path = pgadmit_test_schema;
