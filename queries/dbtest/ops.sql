-- name: OpsBackendPid :one
-- The process id of the server backend running this session (to terminate
-- it from another session).
-- Locks: none.
-- Index: none.
SELECT pg_backend_pid()::integer AS pid;

-- name: OpsCancelBackend :one
-- Sends another session's backend a cancel, as a client's cancel request
-- or statement_timeout would: its running statement, if any, fails with
-- query_canceled (57014); an idle session ignores it.
-- Locks: none (signals the backend).
-- Index: none.
SELECT pg_cancel_backend(@pid::integer)::boolean AS cancelled;

-- name: OpsTerminateBackend :one
-- Terminates another session's backend, as a crash of the network or of
-- the server process would: its open transaction is rolled back and its
-- client gets an admin_shutdown (57P01) error.
-- Locks: none (signals the backend).
-- Index: none.
SELECT pg_terminate_backend(@pid::integer)::boolean AS terminated;

-- name: OpsBackendsWaitingOnLock :many
-- Backends of the current database that are waiting for a lock (heavyweight
-- row, tuple, transaction or advisory lock), so a test can act while a
-- statement is blocked mid-flight.
-- Locks: none.
-- Index: none (pg_stat_activity is an in-memory view).
SELECT a.pid::integer AS pid
FROM pg_catalog.pg_stat_activity AS a
WHERE a.datname = current_database()
  AND a.wait_event_type = 'Lock'
  AND a.pid <> pg_backend_pid()
ORDER BY a.pid;

-- name: OpsBackendsAwaitingLock :many
-- Backends of the current database with a heavyweight lock requested and
-- not granted, read from the lock table: unlike the wait event
-- (OpsBackendsWaitingOnLock), which a waiter clears while it runs its
-- deadlock check (deadlock_timeout, 1 s, into its wait), the request stays
-- there until it is granted or given up, so a test that waits for a
-- cancelled statement to stop waiting never sees it gone too soon.
-- Locks: none.
-- Index: none (pg_locks and pg_stat_activity are in-memory views).
SELECT DISTINCT l.pid::integer AS pid
FROM pg_catalog.pg_locks AS l
JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
WHERE NOT l.granted
  AND a.datname = pg_catalog.current_database()
  AND l.pid <> pg_catalog.pg_backend_pid()
ORDER BY l.pid;

-- name: OpsBackendsWaitingOnTable :many
-- Backends of the current database waiting for a lock on one table (named
-- as the search_path finds it), so a test can tell which of a run's
-- statements waits: a wait on any lock may still be an earlier one's.
-- Locks: none.
-- Index: none (pg_locks is an in-memory view).
SELECT l.pid::integer AS pid
FROM pg_catalog.pg_locks AS l
WHERE l.locktype = 'relation'
  AND NOT l.granted
  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database())
  AND l.relation = pg_catalog.to_regclass(@table_name::text)::oid
  AND l.pid <> pg_catalog.pg_backend_pid()
ORDER BY l.pid;

-- name: OpsNow :one
-- The database's clock, for tests that wait for a lease or window to end.
-- Locks: none.
-- Index: none.
SELECT clock_timestamp()::timestamptz AS now;

-- name: OpsStateSummary :one
-- Totals of the live state and of the books, for tests and drills. Full
-- scans: small databases only.
-- Locks: none (MVCC read).
-- Index: none (sequential scans).
SELECT (SELECT count(*) FROM gateway_tasks WHERE status = 'queued')::bigint                 AS tasks_queued,
       (SELECT count(*) FROM gateway_tasks WHERE status = 'running')::bigint                AS tasks_running,
       (SELECT count(*) FROM gateway_tasks WHERE status = 'succeeded')::bigint              AS tasks_succeeded,
       (SELECT count(*) FROM gateway_tasks WHERE status = 'failed')::bigint                 AS tasks_failed,
       (SELECT count(*) FROM gateway_tasks WHERE status = 'cancelled')::bigint              AS tasks_cancelled,
       (SELECT count(*) FROM gateway_task_attempts WHERE status = 'running')::bigint        AS attempts_running,
       (SELECT count(*) FROM gateway_task_admissions)::bigint                               AS admissions,
       (SELECT count(*) FROM gateway_rate_limit_reservations WHERE status = 'reserved')::bigint  AS reservations_open,
       (SELECT count(*) FROM gateway_rate_limit_reservations WHERE status = 'committed')::bigint AS reservations_committed,
       (SELECT count(*) FROM gateway_rate_limit_reservations WHERE status = 'released')::bigint  AS reservations_released,
       (SELECT count(*) FROM gateway_concurrency_leases WHERE released_at IS NULL)::bigint  AS leases_unreleased,
       (SELECT count(*) FROM gateway_concurrency_leases
        WHERE released_at IS NULL AND expires_at > now())::bigint                           AS leases_live,
       (SELECT coalesce(sum(reserved_value), 0) FROM gateway_rate_limit_counters)::numeric  AS counters_reserved,
       (SELECT coalesce(sum(used_value), 0) FROM gateway_rate_limit_counters)::numeric      AS counters_used;

-- name: OpsUsedByScopeMetric :many
-- used_value and reserved_value summed over every window, per scope and
-- metric: what the counters hold in total.
-- Locks: none (MVCC read).
-- Index: none (sequential scan).
SELECT c.scope_type,
       c.scope_key,
       c.metric,
       sum(c.used_value)::numeric     AS used_value,
       sum(c.reserved_value)::numeric AS reserved_value
FROM gateway_rate_limit_counters AS c
GROUP BY c.scope_type, c.scope_key, c.metric
ORDER BY c.scope_type, c.scope_key, c.metric;

-- name: OpsCounterCorruptAdd :execrows
-- Fault injection: adds to the used and reserved values of every window of
-- one scope and metric, without touching the reservation ledger.
-- Locks: row locks on those counters.
-- Index: gateway_rate_limit_counters_pkey (scope prefix).
UPDATE gateway_rate_limit_counters
SET reserved_value = reserved_value + @reserved_delta::numeric,
    used_value = used_value + @used_delta::numeric
WHERE scope_type = @scope_type::text
  AND scope_key = @scope_key::text
  AND metric = @metric::text;

-- name: OpsCounterCorruptAddOne :execrows
-- Fault injection: adds @used_delta to the used value of one counter (any
-- window) of @metric among the scopes of one type whose keys begin with
-- @key_prefix, without touching the reservation ledger; 0 rows when none
-- has such a counter yet.
-- The counter is named by its key, not its tuple id: a hot counter is
-- updated all the time, and an update by tuple id that waited for it found
-- a newer version and updated nothing.
-- Locks: a row lock on that counter.
-- Index: none: a sequential scan of the counters until one matches (a key
-- prefix cannot use the primary key under the database's collation); then
-- gateway_rate_limit_counters_pkey.
UPDATE gateway_rate_limit_counters AS c
SET used_value = c.used_value + @used_delta::numeric
FROM (SELECT one.scope_type, one.scope_key, one.metric, one.window_seconds, one.window_start
      FROM gateway_rate_limit_counters AS one
      WHERE one.scope_type = @scope_type::text
        AND starts_with(one.scope_key, @key_prefix::text)
        AND one.metric = @metric::text
      LIMIT 1) AS one
WHERE c.scope_type = one.scope_type
  AND c.scope_key = one.scope_key
  AND c.metric = one.metric
  AND c.window_seconds = one.window_seconds
  AND c.window_start = one.window_start;

-- name: OpsCounterCorruptDelete :execrows
-- Fault injection: deletes every window of one scope and metric, leaving
-- its reservations without a counter.
-- Locks: row locks on those counters.
-- Index: gateway_rate_limit_counters_pkey (scope prefix).
DELETE FROM gateway_rate_limit_counters
WHERE scope_type = @scope_type::text
  AND scope_key = @scope_key::text
  AND metric = @metric::text;

-- name: OpsTaskCorruptStatus :execrows
-- Fault injection: sets a task's status (and finished_at for a final one)
-- without any of the cleanup that finishing does, as a buggy or foreign
-- writer would.
-- Locks: FOR NO KEY UPDATE on the task row.
-- Index: gateway_tasks_pkey.
UPDATE gateway_tasks
SET status = @status::text,
    finished_at = CASE WHEN @status::text IN ('succeeded', 'failed', 'cancelled') THEN now() END,
    updated_at = now()
WHERE id = @task_id::uuid;

-- name: OpsBackendCountByApplication :one
-- How many sessions with the given application_name are connected to the
-- current database: a test waits for a killed process's sessions to end
-- (the server has then rolled back whatever they had open).
-- Locks: none.
-- Index: none (pg_stat_activity is an in-memory view).
SELECT count(*)::bigint AS backends
FROM pg_catalog.pg_stat_activity AS a
WHERE a.datname = current_database()
  AND a.application_name = @application_name::text;

-- name: OpsHoldingsByAttempt :many
-- Every reservation and lease attached to one attempt, with its state and
-- why it ended, so a test can check who released what: a reservation's
-- status (reserved, committed, released), a lease's 'unreleased' or
-- 'released'; reason empty while open.
-- Locks: none (MVCC read).
-- Index: gateway_rate_limit_reservations_attempt_idx;
-- gateway_concurrency_leases_attempt_idx.
SELECT 'reservation'::text            AS kind,
       r.id,
       r.status::text                 AS state,
       coalesce(r.reason, '')::text   AS reason
FROM gateway_rate_limit_reservations AS r
WHERE r.attempt_id = @attempt_id::uuid
UNION ALL
SELECT 'lease',
       l.id,
       CASE WHEN l.released_at IS NULL THEN 'unreleased' ELSE 'released' END,
       coalesce(l.reason, '')
FROM gateway_concurrency_leases AS l
WHERE l.attempt_id = @attempt_id::uuid
ORDER BY kind, id;

-- name: OpsReservationCorruptFinalized :execrows
-- Fault injection: stamps a reservation finalized without changing its
-- status, breaking its life cycle as a writer other than pgadmit_settle
-- could.
-- Locks: row lock on that reservation.
-- Index: gateway_rate_limit_reservations_pkey.
UPDATE gateway_rate_limit_reservations
SET finalized_at = now()
WHERE id = @reservation_id::uuid;

-- name: OpsHoldingsByScope :many
-- Every reservation and lease of one scope with the task and attempt it
-- names (NULL once that task was deleted), so a test can check what
-- deleting a task leaves in the ledgers.
-- Locks: none (MVCC read).
-- Index: none specific (filters on scope; for tests and small scopes).
SELECT 'reservation'::text AS kind,
       r.id,
       r.task_id,
       r.attempt_id
FROM gateway_rate_limit_reservations AS r
WHERE r.scope_type = @scope_type::text
  AND r.scope_key = @scope_key::text
UNION ALL
SELECT 'lease',
       l.id,
       l.task_id,
       l.attempt_id
FROM gateway_concurrency_leases AS l
WHERE l.scope_type = @scope_type::text
  AND l.scope_key = @scope_key::text
ORDER BY kind, id;

-- name: OpsLockScopeCounters :execrows
-- Locks every counter row of a scope until the transaction ends, so that a
-- test can stall whatever must lock one of them (a block being taken or
-- returned).
-- Locks: the scope's counter rows, FOR UPDATE.
-- Index: gateway_rate_limit_counters_pkey (its leading columns).
SELECT 1
FROM gateway_rate_limit_counters
WHERE scope_type = @scope_type AND scope_key = @scope_key
FOR UPDATE;

-- name: OpsKeyShareScopeCounters :execrows
-- Takes the weakest row lock, FOR KEY SHARE (what a foreign key's check
-- takes on the row it refers to), on every counter row of a scope until the
-- transaction ends: it stalls only what locks them FOR UPDATE or deletes them.
-- Locks: the scope's counter rows, FOR KEY SHARE.
-- Index: gateway_rate_limit_counters_pkey (its leading columns).
SELECT 1
FROM gateway_rate_limit_counters
WHERE scope_type = @scope_type AND scope_key = @scope_key
FOR KEY SHARE;

-- name: OpsKeyShareTask :execrows
-- Holds a task row FOR KEY SHARE until the transaction ends, as a foreign
-- key's check of a row inserted for the task does.
-- Locks: the task row, FOR KEY SHARE.
-- Index: gateway_tasks_pkey.
SELECT 1
FROM gateway_tasks
WHERE id = @id::uuid
FOR KEY SHARE;

-- name: OpsTaskTouch :execrows
-- Updates a task row without changing it (no key column), so that a test
-- can hold a no-key update of the row and roll it back, as a failed
-- statement of a worker's would.
-- Locks: the task row, FOR NO KEY UPDATE (the update).
-- Index: gateway_tasks_pkey.
UPDATE gateway_tasks
SET updated_at = updated_at
WHERE id = @id::uuid;

-- name: OpsTaskFenceShare :exec
-- Holds a task's fence shared until the transaction ends, as an admission
-- for the task does once its rows are written (pgadmit_task_recheck).
-- Locks: pg_advisory_xact_lock_shared on the task's fence key.
-- Index: none.
SELECT pg_advisory_xact_lock_shared(pgadmit_task_fence_key(@id::uuid));

-- name: OpsLeaseLock :execrows
-- Locks one lease row until the transaction ends, so that a test can stall
-- whatever must lock it.
-- Locks: the lease row, FOR UPDATE.
-- Index: gateway_concurrency_leases_pkey.
SELECT 1
FROM gateway_concurrency_leases
WHERE id = @id::uuid
FOR UPDATE;

-- name: OpsLockMaintenanceLeases :exec
-- Locks the table of maintenance leases until the transaction ends, so
-- that a test can make every Recover and Prune run hang at its first step.
-- Locks: ACCESS EXCLUSIVE on gateway_maintenance_leases.
-- Index: none.
LOCK TABLE gateway_maintenance_leases IN ACCESS EXCLUSIVE MODE;

-- name: OpsMaintenanceLeasePlant :exec
-- Writes the lease of job @name as held by @holder until @expires_at, as a
-- process that took it and then died leaves it.
-- Locks: the lease row (upsert).
-- Index: gateway_maintenance_leases_pkey.
INSERT INTO gateway_maintenance_leases AS l (name, holder, acquired_at, expires_at)
VALUES (@name::text, @holder::text, @expires_at::timestamptz, @expires_at::timestamptz)
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder,
    acquired_at = excluded.acquired_at,
    expires_at = excluded.expires_at;

-- name: OpsMaintenanceLeaseLock :execrows
-- Locks the lease row of job @name until the transaction ends, without
-- changing it, so that a test can make a take of that lease wait for it.
-- Locks: the lease row, FOR UPDATE.
-- Index: gateway_maintenance_leases_pkey.
SELECT 1
FROM gateway_maintenance_leases
WHERE name = @name::text
FOR UPDATE;

-- name: OpsTaskHeartbeatAt :one
-- A task's heartbeat_at, which no public read returns: a test checks what
-- each lifecycle step leaves in it.
-- Locks: none (MVCC read).
-- Index: gateway_tasks_pkey.
SELECT t.heartbeat_at
FROM gateway_tasks AS t
WHERE t.id = @task_id::uuid;

-- name: OpsLockCounters :exec
-- Locks the table of counters until the transaction ends, as a long
-- migration's ALTER TABLE would, so that a test can make whatever reads or
-- alters it wait (inspect, doctor, a migration).
-- Locks: ACCESS EXCLUSIVE on gateway_rate_limit_counters.
-- Index: none.
LOCK TABLE gateway_rate_limit_counters IN ACCESS EXCLUSIVE MODE;

-- name: OpsLockTasks :exec
-- Locks the table of tasks until the transaction ends, as a long
-- migration's ALTER TABLE would, so that a test can make whatever reads it
-- wait (the first step of Recover, which finds expired tasks).
-- Locks: ACCESS EXCLUSIVE on gateway_tasks.
-- Index: none.
LOCK TABLE gateway_tasks IN ACCESS EXCLUSIVE MODE;

-- name: OpsListenPeek :exec
-- Has this session listen on the channel pgadmit_peek, so that a
-- notification reaches it while it sits idle in a pool.
-- Locks: none.
-- Index: none.
LISTEN pgadmit_peek;

-- name: OpsNotifyPeek :exec
-- Sends a notification on the channel pgadmit_peek (delivered to its
-- listeners when this transaction commits).
-- Locks: none (takes the notification queue's lock at commit).
-- Index: none.
SELECT pg_notify('pgadmit_peek', @payload::text);

-- name: OpsLockMaintenanceCursors :exec
-- Locks the table of maintenance cursors until the transaction ends, as a
-- long migration's ALTER TABLE would, so that a test can make Prune's read
-- of its events position wait.
-- Locks: ACCESS EXCLUSIVE on gateway_maintenance_cursors.
-- Index: none.
LOCK TABLE gateway_maintenance_cursors IN ACCESS EXCLUSIVE MODE;

-- name: OpsLockTimeoutMillis :one
-- The lock_timeout in force in this transaction (what SHOW lock_timeout and
-- current_setting say), in milliseconds, its unit: what SetMaintenanceSettings set
-- before it.
-- Locks: none.
-- Index: none (no table).
SELECT s.setting::bigint AS lock_timeout_ms
FROM pg_catalog.pg_settings AS s
WHERE s.name = 'lock_timeout';

-- name: OpsCreateSchemaOfItsOwn :exec
-- Creates the schema pgadmit for a test that migrates pgadmit into a schema
-- of its own (the first of its sessions' search_path), as a DBA would.
-- Locks: none on pgadmit's tables (a new namespace).
-- Index: none.
CREATE SCHEMA pgadmit;

-- name: OpsAllotmentsRefuseBlocks :exec
-- Makes every new block fail, for a test of block requests that fail: a
-- constraint no granted amount meets, checked on new rows only (NOT VALID).
-- Locks: gateway_rate_limit_allotments ACCESS EXCLUSIVE, for the
-- statement's transaction.
-- Index: none.
ALTER TABLE gateway_rate_limit_allotments
    ADD CONSTRAINT pgadmit_test_refuses_blocks CHECK (granted < 0) NOT VALID;

-- name: OpsAllotmentsAllowBlocks :exec
-- Drops the constraint of OpsAllotmentsRefuseBlocks.
-- Locks: gateway_rate_limit_allotments ACCESS EXCLUSIVE, for the statement's
-- transaction.
-- Index: none.
ALTER TABLE gateway_rate_limit_allotments DROP CONSTRAINT pgadmit_test_refuses_blocks;

-- name: OpsPutSchemaOfItsOwnFirstForMe :exec
-- Sets the session role's search_path in this database to the schema
-- pgadmit (ALTER ROLE ... IN DATABASE ... SET), as a DBA would for a role
-- that reaches pgadmit through a pooler: sessions opened later start with
-- it. A role may set its own defaults; the setting goes with the database.
-- Locks: pg_db_role_setting's row of the role and database.
-- Index: none.
DO $$
BEGIN
    EXECUTE format('ALTER ROLE %I IN DATABASE %I SET search_path = pgadmit', current_user, current_database());
END
$$;

-- name: OpsSetMyTimeZoneAndDateStyle :exec
-- Sets the session role's TimeZone in this database to Asia/Kathmandu
-- (+05:45) and its DateStyle to German (05.12.2026 18:45:00 +0545), as a
-- DBA of a gateway outside UTC might (ALTER ROLE ... IN DATABASE ... SET):
-- sessions opened later start with them.
-- Locks: pg_db_role_setting's row of the role and database.
-- Index: none.
DO $$
BEGIN
    EXECUTE format('ALTER ROLE %I IN DATABASE %I SET TimeZone = %L', current_user, current_database(), 'Asia/Kathmandu');
    EXECUTE format('ALTER ROLE %I IN DATABASE %I SET DateStyle = %L', current_user, current_database(), 'German, DMY');
END
$$;

-- name: OpsSessionClockSettings :one
-- The session's TimeZone and DateStyle.
-- Locks: none.
-- Index: none.
SELECT current_setting('TimeZone')::text AS time_zone,
       current_setting('DateStyle')::text AS date_style;

-- name: OpsRevokeLogicalMessages :exec
-- Revokes EXECUTE on pg_logical_emit_message from PUBLIC in this database
-- (pg_proc is the database's own), as a DBA hardening a server might: the
-- second transaction of pgadmit_hot_commit, after its first COMMIT, then
-- fails with insufficient_privilege (42501) for a role that is not a
-- superuser.
-- Locks: pg_proc's rows of the two functions.
-- Index: none.
DO $$
BEGIN
    REVOKE EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean, text, text) FROM PUBLIC;
    REVOKE EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean, text, bytea) FROM PUBLIC;
END
$$;

-- name: OpsRevokeGatewayVersionRead :exec
-- Revokes SELECT on pgadmit_goose_version (a grant of docs/privileges.sql)
-- in this database from the gateway group, whatever name the test gave it
-- (pgadmit_gateway_<suffix>): a role that may not read the schema version,
-- for the tests of what the CLI says then. A DO block: goose makes the
-- table, so sqlc's schema has none.
-- Locks: pgadmit_goose_version's pg_class row.
-- Index: none.
DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT DISTINCT grantee
             FROM information_schema.role_table_grants
             WHERE table_name = 'pgadmit_goose_version'
               AND grantee LIKE 'pgadmit\_gateway%'
    LOOP
        EXECUTE format('REVOKE SELECT ON pgadmit_goose_version FROM %I', r);
    END LOOP;
END
$$;

-- name: OpsRevokeGatewayTableGrants :exec
-- Revokes every privilege on the tables of the current schema (what
-- docs/privileges.sql grants there) in this database from the gateway
-- group, whatever name the test gave it (pgadmit_gateway_<suffix>): a role
-- with no grant at all on pgadmit's tables, for the tests of what the CLI
-- says then. A DO block: GRANT and REVOKE name their roles, which the test
-- names.
-- Locks: the pg_class rows of the schema's tables.
-- Index: none.
DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT DISTINCT grantee
             FROM information_schema.role_table_grants
             WHERE table_schema = pg_catalog.current_schema()
               AND grantee LIKE 'pgadmit\_gateway%'
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM %I', pg_catalog.current_schema(), r);
    END LOOP;
END
$$;

-- name: OpsGrantCreateToPublic :exec
-- Lets every role create objects in the current schema, as PostgreSQL
-- before 15 let every role create in public: for a test of what
-- docs/privileges.sql leaves its roles there.
-- Locks: pg_namespace's row of the schema.
-- Index: none.
DO $$
BEGIN
    EXECUTE format('GRANT CREATE ON SCHEMA %I TO PUBLIC', current_schema());
END
$$;

-- name: OpsPlantLookalikes :exec
-- Creates, each in a schema of its own named lookalike_<what>, functions,
-- aggregates and operators that match a call inside pgadmit's functions
-- exactly where PostgreSQL's own needs a cast or is polymorphic: a
-- set_bit(bytea, integer, integer) for pg_catalog's (bytea, bigint,
-- integer), a numeric > integer for numeric > numeric, an array_agg(text)
-- for array_agg(anynonarray), and so on, and a pgadmit_reserve that takes
-- text where pgadmit's takes arrays (for a call that passes '{}'); and the
-- same for the calls of the statements of queries/*.sql (docs/lookalikes.md):
-- an unnest(text[]), a generate_subscripts(text[], integer), a
-- jsonb_build_object of each list of argument types a statement passes
-- (pg_catalog's takes VARIADIC "any"), a bigint >= numeric, a
-- pgadmit_allot taking integers where a call passed 0, a name ~~ name (a
-- LIKE of a name column and a literal). A role
-- that may create in a schema on a caller's search_path (public, before
-- PostgreSQL 15) could plant them; each fails the statement that runs it,
-- naming itself and the role it ran as.
-- Locks: none on pgadmit's tables (new schemas).
-- Index: none.
DO $do$
DECLARE
    f text[];
BEGIN
    -- schema suffix, signature, result
    FOREACH f SLICE 1 IN ARRAY ARRAY[
        ['set_bit', 'set_bit(bytea, integer, integer)', 'bytea'],
        ['make_interval', 'make_interval(secs integer)', 'interval'],
        ['hashtextextended', 'hashtextextended(text, integer)', 'bigint'],
        ['unnest', 'unnest(uuid[])', 'SETOF uuid'],
        ['unnest', 'unnest(text[])', 'SETOF text'],
        ['unnest', 'unnest(integer[])', 'SETOF integer'],
        ['unnest', 'unnest(numeric[])', 'SETOF numeric'],
        ['generate_subscripts', 'generate_subscripts(text[], integer)', 'SETOF integer'],
        ['jsonb_build_object', 'jsonb_build_object(text, bigint)', 'jsonb'],
        ['jsonb_build_object', 'jsonb_build_object(text, text)', 'jsonb'],
        ['jsonb_build_object', 'jsonb_build_object(text, integer, text, text)', 'jsonb'],
        ['jsonb_build_object', 'jsonb_build_object(text, text, text, integer)', 'jsonb'],
        ['jsonb_build_object', 'jsonb_build_object(text, text, text, text, text, integer, text, integer)', 'jsonb'],
        ['bigint_ge_numeric', 'op(bigint, numeric)', 'boolean'],
        ['name_like_name', 'op(name, name)', 'boolean'],
        ['array_remove', 'array_remove(uuid[], uuid)', 'uuid[]'],
        ['cardinality', 'cardinality(uuid[])', 'integer'],
        ['cardinality', 'cardinality(text[])', 'integer'],
        ['cardinality', 'cardinality(integer[])', 'integer'],
        ['cardinality', 'cardinality(numeric[])', 'integer'],
        ['array_fill', 'array_fill(text, integer[])', 'text[]'],
        ['array_fill', 'array_fill(boolean, integer[])', 'boolean[]'],
        ['array_fill', 'array_fill(numeric, integer[])', 'numeric[]'],
        ['array_fill', 'array_fill(uuid, integer[])', 'uuid[]'],
        ['array_fill', 'array_fill(integer, integer[])', 'integer[]'],
        ['array_fill', 'array_fill(timestamptz, integer[])', 'timestamptz[]'],
        ['array_agg', 'array_agg_step(anyarray, anyelement)', 'anyarray'],
        ['numeric_times_integer', 'op(numeric, integer)', 'numeric'],
        ['numeric_over_integer', 'op(numeric, integer)', 'numeric'],
        ['numeric_gt_integer', 'op(numeric, integer)', 'boolean'],
        ['numeric_eq_integer', 'op(numeric, integer)', 'boolean'],
        ['integer_eq_numeric', 'op(integer, numeric)', 'boolean'],
        ['text_array_contained', 'op(text[], text[])', 'boolean'],
        ['pgadmit_reserve', 'pgadmit_reserve(uuid[], uuid[], integer[], text[], text[], text[], integer[], numeric[], numeric[], text, text, text, text, text, text, timestamptz)',
         'TABLE(admission integer, is_lease boolean, ord integer, fits boolean, grant_id uuid, current_value numeric, reserved_value numeric, window_start timestamptz, reset_at timestamptz, db_now timestamptz, refusal text)'],
        ['pgadmit_allot', 'pgadmit_allot(text, text, text, text, integer, numeric, integer, integer, uuid, numeric, timestamptz)',
         'TABLE(allotment_id uuid, granted numeric, current_value numeric, reserved_value numeric, window_start timestamptz, reset_at timestamptz, db_now timestamptz)']
    ] LOOP
        EXECUTE pg_catalog.format('CREATE SCHEMA IF NOT EXISTS %I', 'lookalike_' || f[1]);
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION %I.%s RETURNS %s LANGUAGE plpgsql AS $f$BEGIN RAISE EXCEPTION %L, current_user; END$f$',
            'lookalike_' || f[1], f[2], f[3], 'lookalike ' || f[1] || ' ' || f[2] || ' ran as %');
    END LOOP;
    CREATE OPERATOR lookalike_numeric_times_integer.* (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = lookalike_numeric_times_integer.op);
    CREATE OPERATOR lookalike_numeric_over_integer./ (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = lookalike_numeric_over_integer.op);
    CREATE OPERATOR lookalike_numeric_gt_integer.> (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = lookalike_numeric_gt_integer.op);
    CREATE OPERATOR lookalike_numeric_eq_integer.= (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = lookalike_numeric_eq_integer.op);
    CREATE OPERATOR lookalike_integer_eq_numeric.= (LEFTARG = integer, RIGHTARG = numeric, FUNCTION = lookalike_integer_eq_numeric.op);
    CREATE OPERATOR lookalike_text_array_contained.<@ (LEFTARG = text[], RIGHTARG = text[], FUNCTION = lookalike_text_array_contained.op);
    CREATE OPERATOR lookalike_bigint_ge_numeric.>= (LEFTARG = bigint, RIGHTARG = numeric, FUNCTION = lookalike_bigint_ge_numeric.op);
    CREATE OPERATOR lookalike_name_like_name.~~ (LEFTARG = name, RIGHTARG = name, FUNCTION = lookalike_name_like_name.op);
    FOREACH f SLICE 1 IN ARRAY ARRAY[['text'], ['integer'], ['bigint'], ['numeric'], ['timestamptz'], ['uuid']] LOOP
        EXECUTE pg_catalog.format(
            'CREATE AGGREGATE lookalike_array_agg.array_agg(%s) (SFUNC = lookalike_array_agg.array_agg_step, STYPE = %s[])',
            f[1], f[1]);
    END LOOP;
END
$do$;

-- name: OpsLookalikeSchemas :many
-- The schemas OpsPlantLookalikes created, by name.
-- Locks: none.
-- Index: none (catalog).
SELECT n.nspname::text AS name
FROM pg_catalog.pg_namespace AS n
WHERE n.nspname LIKE 'lookalike\_%'
ORDER BY n.nspname;

-- name: OpsCurrentJIT :one
-- Whether the server may JIT-compile the statements of this transaction:
-- jit as in force here (SHOW jit), 'on' or 'off'.
-- Locks: none.
-- Index: none (no table).
SELECT pg_catalog.current_setting('jit') AS jit;

-- name: OpsRefuseWritesUnderJIT :exec
-- Makes sessions opened later in this database start with jit on (ALTER
-- DATABASE ... SET), and every statement that writes a table of pgadmit's
-- fail while jit is on in its transaction: a statement-level trigger on
-- each, which fires whether or not the statement changes a row, raises
-- "pgadmit test: jit is on" (SQLSTATE P0001). A test arms it to see that
-- the maintenance transactions turn jit off.
-- Locks: ACCESS EXCLUSIVE on each table briefly (CREATE TRIGGER).
-- Index: none.
DO $$
DECLARE
    t text;
BEGIN
    EXECUTE pg_catalog.format('ALTER DATABASE %I SET jit = on', pg_catalog.current_database());
    CREATE FUNCTION pgadmit_test_refuse_under_jit() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF pg_catalog.current_setting('jit')::boolean THEN
            RAISE EXCEPTION 'pgadmit test: jit is on: % on %', TG_OP, TG_TABLE_NAME;
        END IF;
        RETURN NULL;
    END
    $f$;
    FOREACH t IN ARRAY ARRAY['gateway_tasks', 'gateway_task_attempts', 'gateway_task_events', 'gateway_task_admissions',
                             'gateway_rate_limit_counters', 'gateway_rate_limit_reservations', 'gateway_concurrency_leases',
                             'gateway_rate_limit_allotments', 'gateway_maintenance_leases', 'gateway_maintenance_cursors'] LOOP
        EXECUTE pg_catalog.format(
            'CREATE TRIGGER pgadmit_test_refuse_under_jit AFTER INSERT OR UPDATE OR DELETE ON %I FOR EACH STATEMENT EXECUTE FUNCTION pgadmit_test_refuse_under_jit()', t);
    END LOOP;
END
$$;

-- name: OpsLedgerRowRelink :one
-- Fault injection: points a reservation or lease (by id, in either ledger)
-- at the given task and attempt (NULL: none), as a writer other than
-- pgadmit's functions could: an attempt of another task than its own, or
-- an attempt without its task. Returns how many rows it changed.
-- Locks: row lock on that row.
-- Index: gateway_rate_limit_reservations_pkey, gateway_concurrency_leases_pkey.
WITH r AS (
    UPDATE gateway_rate_limit_reservations
    SET task_id = sqlc.narg('task_id')::uuid, attempt_id = sqlc.narg('attempt_id')::uuid
    WHERE id = @id::uuid
    RETURNING id
),
l AS (
    UPDATE gateway_concurrency_leases
    SET task_id = sqlc.narg('task_id')::uuid, attempt_id = sqlc.narg('attempt_id')::uuid
    WHERE id = @id::uuid
    RETURNING id
)
SELECT ((SELECT count(*) FROM r) + (SELECT count(*) FROM l))::bigint AS relinked;

-- name: OpsLockVersionTable :exec
-- Locks pgadmit's schema version table until the transaction ends, so that
-- a test can make the CLI's read of the schema version wait. A DO block:
-- goose makes the table, so sqlc's schema has none.
-- Locks: ACCESS EXCLUSIVE on pgadmit_goose_version.
-- Index: none.
DO $$
BEGIN
    LOCK TABLE pgadmit_goose_version IN ACCESS EXCLUSIVE MODE;
END
$$;

-- name: OpsHideCountersAndTasks :exec
-- Renames the tables of counters and tasks (adding _hidden), so that a
-- test can make a statement that waited for a lock on one of them fail as
-- it does on a database that lacks it (42P01, undefined_table). A DO
-- block: sqlc's schema would lose the tables.
-- Locks: ACCESS EXCLUSIVE on gateway_rate_limit_counters and gateway_tasks.
-- Index: none.
DO $$
BEGIN
    ALTER TABLE gateway_rate_limit_counters RENAME TO gateway_rate_limit_counters_hidden;
    ALTER TABLE gateway_tasks RENAME TO gateway_tasks_hidden;
END
$$;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Operations and fault injection: statements for tests, drills and
-- operators. The ratelimit package never runs them. The Ops*Corrupt*
-- statements deliberately break the books, so that tests can check that the
-- doctor names each kind of damage; never run them on a real database.
