-- name: BenchServerSetting :one
-- The value of a server setting as this session sees it (empty when there is
-- no such setting, as for an extension's settings before its library is
-- loaded).
-- Locks: none.
-- Index: none (no table).
SELECT coalesce(current_setting(@name::text, true), '')::text AS value;

-- name: BenchStatementStatsProbe :one
-- Whether pg_stat_statements can report in this database: its library is
-- loaded (its settings exist only then), the extension can be created (its
-- control file is installed), the version created in this database (empty when
-- none is), and the tracking settings this session has.
-- Locks: none (catalog reads).
-- Index: pg_extension_name_index; pg_available_extensions reads the
-- extension directory, not a table.
SELECT (current_setting('pg_stat_statements.max', true) IS NOT NULL)::boolean AS loaded,
       EXISTS (
           SELECT 1
           FROM pg_catalog.pg_available_extensions AS e
           WHERE e.name = 'pg_stat_statements'
       )::boolean AS available,
       coalesce((
           SELECT x.extversion
           FROM pg_catalog.pg_extension AS x
           WHERE x.extname = 'pg_stat_statements'
       ), '')::text AS created_version,
       coalesce(current_setting('pg_stat_statements.track', true), '')::text AS track,
       coalesce(current_setting('pg_stat_statements.track_planning', true), '')::text AS track_planning;

-- name: BenchStatementStatsCreate :exec
-- Creates the pg_stat_statements extension in this database: its view and
-- functions (the statistics are kept server-wide by the preloaded library).
-- Needs a superuser: the extension is not marked trusted. IF NOT EXISTS
-- makes it a no-op where it exists.
-- Locks: the catalog rows it inserts (pg_extension, the view, the
-- functions); nothing of pgadmit.
-- Index: pg_extension_name_index.
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;

-- name: BenchStatementTrackingSet :exec
-- Sets, for the current transaction only, which statements pg_stat_statements
-- tracks ('top', 'all': also those nested in functions, 'none') and whether
-- it times planning ('on', 'off'); run on its own, it only checks that the
-- role may. Both are superuser-settable: a role without the privilege gets
-- SQLSTATE 42501 and nothing changes. Never session-level: behind a
-- transaction-pooling proxy the setting would stay on a server session that
-- other clients get next.
-- Locks: none.
-- Index: none (no table).
SELECT set_config('pg_stat_statements.track', @track::text, true),
       set_config('pg_stat_statements.track_planning', @track_planning::text, true);

-- name: BenchStatementStats :many
-- The cumulative statistics of every statement the current role ran in the
-- current database, top-level ones and those nested in functions, with
-- their text: a snapshot, which the caller subtracts from a later one.
-- Calls to the extension's function directly (not its view), so that the
-- statement names the columns it reads; queryid is NULL only for other
-- roles' statements, which the filter leaves out anyway.
-- Locks: none; pg_stat_statements holds its shared-memory lock in shared
-- mode while it copies the entries and reads the query-text file.
-- Index: none for the entries (a function scan of at most
-- pg_stat_statements.max of them); the filter's two lookups use
-- pg_database_datname_index and pg_authid_rolname_index.
-- @sqlc-vet-disable sqlc/db-prepare
SELECT s.queryid::bigint          AS queryid,
       s.toplevel::boolean        AS toplevel,
       s.calls::bigint            AS calls,
       s.plans::bigint            AS plans,
       s.total_plan_time::float8  AS total_plan_ms,
       s.total_exec_time::float8  AS total_exec_ms,
       s.rows::bigint             AS rows,
       s.query::text              AS query
FROM pg_stat_statements(true) AS s
WHERE s.dbid = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())
  AND s.userid = (SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user)
  AND s.queryid IS NOT NULL;

-- name: BenchFunctionSources :many
-- The source of pgadmit's PL/pgSQL functions (pgadmit_*), to tell in which
-- of them a nested statement of pg_stat_statements runs.
-- Locks: none (catalog read).
-- Index: none needed (pg_proc is a small catalog, scanned once per run).
SELECT p.proname::text AS name,
       p.prosrc::text  AS source
FROM pg_catalog.pg_proc AS p
WHERE p.proname LIKE 'pgadmit\_%'::text
  AND p.prolang = (SELECT l.oid FROM pg_catalog.pg_language AS l WHERE l.lanname = 'plpgsql')
ORDER BY p.proname;

-- name: BenchSessionActivity :many
-- What every other session of this database with the given
-- application_name is doing at this moment: its state ('active' while it
-- executes a statement) and what it waits for, if anything. `pgadmit bench
-- --waits` samples it many times a second while a workload runs; each call
-- outside a transaction reads a fresh copy of the activity statistics.
-- Locks: none (reads the server's shared-memory array of sessions).
-- Index: none (a function scan of at most max_connections entries).
SELECT coalesce(a.state, '')::text           AS state,
       coalesce(a.wait_event_type, '')::text AS wait_event_type,
       coalesce(a.wait_event, '')::text      AS wait_event
FROM pg_catalog.pg_stat_activity AS a
WHERE a.datname = current_database()
  AND a.application_name = @application_name::text
  AND a.pid <> pg_backend_pid();

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Benchmark statements: what `pgadmit bench` reads, besides the workloads
-- themselves, to show where server time goes. The ratelimit package never
-- runs them. They read settings, catalogs and the statistics of the
-- pg_stat_statements extension (an optional contrib module: its library must
-- be in shared_preload_libraries), never pgadmit's tables.
--
-- The extension is not part of pgadmit's migrations, so sqlc vet's
-- sqlc/db-prepare rule (run against a freshly migrated database) cannot
-- prepare the statement that calls it; it carries @sqlc-vet-disable, and
-- the tests of cmd/pgadmit run them on a cluster that preloads the library.
