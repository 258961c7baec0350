-- Every function and procedure of pgadmit but pgadmit_hot_commit sets its
-- own search_path: the schema it was migrated into, then pg_temp.
--
-- They run with their caller's privileges (none is SECURITY DEFINER), and
-- until now they resolved every table, function and operator they name
-- through their caller's search_path. A function of another schema on that
-- path that matches a call more closely than PostgreSQL's own ran in its
-- place, with the caller's privileges: pgadmit_uuidv7 passes an integer to
-- set_bit, whose pg_catalog version takes a bigint, so a
-- public.set_bit(bytea, integer, integer) ran inside every Reserve of a
-- window limit, and a public.make_interval(secs integer) inside every Reserve
-- of a concurrent limit and every RenewLeases (PostgreSQL picks an exact
-- match over one that needs a cast, wherever on the path it lies). Any role
-- that may create in a schema on a gateway's search_path could plant them:
-- public, on PostgreSQL before 15 (CREATE for every role), kept after
-- pgadmit's own schema (search_path = pgadmit, public), or a role that
-- calls pgadmit as the tables' owner. TestFunctionsIgnoreLookalikesOutsideTheirSchema
-- plants both.
--
-- With the schema pinned, a function sees pg_catalog (searched first, as
-- always), its own schema, and the caller's temporary tables last (so that
-- none stands in for one of pgadmit's): nothing the caller's search_path
-- adds. The schema is the migrating session's current_schema(), the one
-- the tables are in, so a copy of pgadmit in public and another in a
-- schema of its own each use their own tables. A schema where other roles
-- may create objects is still no safer than before: docs/privileges.sql
-- revokes CREATE on it from PUBLIC.
--
-- Cost: a function with settings saves and restores them on each call, and
-- a SQL function with settings is not inlined (pgadmit_uuidv7, one per
-- ledger row; pgadmit_task_fence_key, one per task fence): a few
-- microseconds a call. Those that already had planner settings (the
-- array-taking ones) pay no more. A later migration that redefines one of
-- them must repeat the SET clause (CREATE OR REPLACE replaces the
-- settings); TestFunctionsSetTheirSearchPath fails otherwise.
--
-- One procedure keeps its caller's search_path: pgadmit_hot_commit, which
-- commits, and a procedure with a SET clause may not (it raised 2D000,
-- invalid transaction termination, and the Limiter, taking that for a
-- batch sent as one query, sent no hot batch again: TestTrafficAcrossLiveMigrations
-- saw none). It names no table; it calls set_config and
-- pg_logical_emit_message, now as pg_catalog's, which no lookalike stands in
-- for.
--
-- ALTER FUNCTION and CREATE OR REPLACE PROCEDURE take no lock that a
-- running call holds: this applies at once under traffic. Down removes the
-- setting and restores pgadmit_hot_commit as 00012 made it.

-- +goose Up
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid) AS args
        FROM pg_catalog.pg_proc AS p
        WHERE p.pronamespace = pg_catalog.current_schema()::regnamespace
          AND p.proname LIKE 'pgadmit\_%'
          AND p.proname <> 'pgadmit_hot_commit'
        ORDER BY 1, 2
    LOOP
        EXECUTE pg_catalog.format('ALTER ROUTINE %I.%I(%s) SET search_path = %I, pg_temp',
            pg_catalog.current_schema(), r.proname, r.args, pg_catalog.current_schema());
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE PROCEDURE pgadmit_hot_commit()
LANGUAGE plpgsql AS $$
-- Commits the caller's implicit transaction without waiting for its flush,
-- then returns once a second, durable commit has flushed it. Called in the
-- same pipeline (before its Sync) as the statement of a batch on a hot
-- counter, never in a transaction block (where a procedure cannot commit).
-- It sets no search_path (a procedure that does may not commit): what it
-- calls is named in pg_catalog.
-- Locks: none of its own; its COMMIT releases those of the batch.
BEGIN
    PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    COMMIT;
    PERFORM pg_catalog.pg_logical_emit_message(true, 'pgadmit', 'flush');
END;
$$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid) AS args
        FROM pg_catalog.pg_proc AS p
        WHERE p.pronamespace = pg_catalog.current_schema()::regnamespace
          AND p.proname LIKE 'pgadmit\_%'
        ORDER BY 1, 2
    LOOP
        EXECUTE pg_catalog.format('ALTER ROUTINE %I.%I(%s) RESET search_path',
            pg_catalog.current_schema(), r.proname, r.args);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE PROCEDURE pgadmit_hot_commit()
LANGUAGE plpgsql AS $$
-- Commits the caller's implicit transaction without waiting for its flush,
-- then returns once a second, durable commit has flushed it. Called in the
-- same pipeline (before its Sync) as the statement of a batch on a hot
-- counter, never in a transaction block (where a procedure cannot commit).
-- Locks: none of its own; its COMMIT releases those of the batch.
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    COMMIT;
    PERFORM pg_logical_emit_message(true, 'pgadmit', 'flush');
END;
$$;
-- +goose StatementEnd
