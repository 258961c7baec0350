-- name: FixtureFill :exec
-- Fills every table with @rows rows of realistic shape: most tasks finished,
-- a few running with a live execution lease, most reservations committed,
-- most leases released, many past windows per scope. Finish times spread
-- over the last 27 hours, so a one-day prune cutoff selects a few percent,
-- as a daily prune does. Amounts balance, so the books stay correct.
-- Locks: row locks on the inserted rows only.
-- Index: the inserts maintain every index; no reads.
WITH tasks AS (
    INSERT INTO gateway_tasks (
        status, async_mode, kind, attempt_count, last_event_seq, execution_lease_expires_at,
        finished_at, created_at
    )
    SELECT CASE WHEN g % 50 = 0 THEN 'running' WHEN g % 50 = 1 THEN 'queued' ELSE 'succeeded' END,
           g % 2 = 0,
           'fixture',
           1,
           1,
           CASE WHEN g % 50 = 0 THEN now() + interval '1 hour' END,
           CASE WHEN g % 50 > 1 THEN now() - (g % 27) * interval '1 hour' END,
           now() - interval '2 days'
    FROM generate_series(1, @rows::integer) AS g
    RETURNING id, status
),
attempts AS (
    INSERT INTO gateway_task_attempts (task_id, attempt_no, status, finished_at)
    SELECT id, 1,
           CASE WHEN status = 'running' THEN 'running' ELSE 'succeeded' END,
           CASE WHEN status = 'running' THEN NULL ELSE now() - interval '2 days' END
    FROM tasks
    WHERE status <> 'queued'
    RETURNING id
),
events AS (
    INSERT INTO gateway_task_events (task_id, seq, event_type, status)
    SELECT id, 1, 'task.queued', 'queued'
    FROM tasks
    RETURNING id
),
admissions AS (
    INSERT INTO gateway_task_admissions (task_id, scope_type, scope_key, limit_value)
    SELECT id, 'fixture_queue', 'q' || (row_number() OVER () % 100)::text, 1000000
    FROM tasks
    WHERE status IN ('queued', 'running')
    RETURNING task_id
),
windows AS (
    SELECT g,
           'fixture_key'                                              AS scope_type,
           'k' || (g % 100)::text                                     AS scope_key,
           date_bin(interval '60 seconds', now(), timestamptz 'epoch') - (g / 100) * interval '60 seconds' AS window_start
    FROM generate_series(1, @rows::integer) AS g
),
counters AS (
    INSERT INTO gateway_rate_limit_counters (
        scope_type, scope_key, metric, window_seconds, window_start, reset_at, limit_value, used_value
    )
    SELECT scope_type, scope_key, 'tokens', 60, window_start, window_start + interval '60 seconds', 1000000, 420
    FROM windows
    RETURNING scope_type
),
reservations AS (
    INSERT INTO gateway_rate_limit_reservations (
        scope_type, scope_key, metric, window_seconds, window_start, limit_value, reserved_amount,
        actual_amount, status, finalized_at
    )
    SELECT scope_type, scope_key, 'tokens', 60, window_start, 1000000, 500, 420, 'committed', now() - (g % 27) * interval '1 hour'
    FROM windows
    RETURNING id
)
INSERT INTO gateway_concurrency_leases (scope_type, scope_key, lease_value, limit_value, expires_at, released_at)
SELECT 'fixture_model', 'm' || (g % 10)::text, 1, 1000000,
       now() - (g % 27) * interval '1 hour',
       now() - (g % 27) * interval '1 hour'
FROM generate_series(1, @rows::integer) AS g;

-- name: FixtureFillAllotments :exec
-- Adds @rows returned blocks (allotments) in FixtureFill's windows: a
-- hundred keys, one 60-second window a minute back in time per hundred
-- rows, each block returned with all it was granted used.
-- Locks: row locks on the inserted rows only.
-- Index: the inserts maintain every index; no reads.
INSERT INTO gateway_rate_limit_allotments (
    holder, scope_type, scope_key, metric, window_seconds, window_start, expires_at, limit_value,
    granted, consumed, returned_at, used, reason
)
SELECT 'fixture', 'fixture_key', 'k' || (g % 100)::text, 'tokens', 60, w.window_start,
       w.window_start + interval '60 seconds', 1000000, 100, 100, w.window_start + interval '60 seconds', 100,
       'fixture'
FROM generate_series(1, @rows::integer) AS g
CROSS JOIN LATERAL (
    SELECT date_bin(interval '60 seconds', now(), timestamptz 'epoch') - (g / 100) * interval '60 seconds' AS window_start
) AS w;

-- name: FixtureFillAllotmentsScattered :exec
-- FixtureFillAllotments, with the blocks written to the table in an order
-- unrelated to their windows, as a table ends up after months of traffic:
-- blocks of a day's window lie among those of a minute's, and the space
-- that pruned blocks leave is reused by new ones. The planner then knows
-- that reading the blocks in expiry order costs a random read each.
-- Locks: row locks on the inserted rows only.
-- Index: the inserts maintain every index; no reads.
INSERT INTO gateway_rate_limit_allotments (
    holder, scope_type, scope_key, metric, window_seconds, window_start, expires_at, limit_value,
    granted, consumed, returned_at, used, reason
)
SELECT 'fixture', 'fixture_key', 'k' || (g % 100)::text, 'tokens', 60, w.window_start,
       w.window_start + interval '60 seconds', 1000000, 100, 100, w.window_start + interval '60 seconds', 100,
       'fixture'
FROM generate_series(1, @rows::integer) AS g
CROSS JOIN LATERAL (
    SELECT date_bin(interval '60 seconds', now(), timestamptz 'epoch') - (g / 100) * interval '60 seconds' AS window_start
) AS w
ORDER BY md5(g::text);

-- name: FixtureFillQueue :exec
-- Adds a queue backlog: @rows queued async tasks, each holding a place in
-- one of a hundred queue scopes (an admission), as a gateway whose workers
-- fall behind keeps them.
-- Locks: row locks on the inserted rows only.
-- Index: the inserts maintain every index; no reads.
WITH tasks AS (
    INSERT INTO gateway_tasks (status, async_mode, kind, last_event_seq, created_at)
    SELECT 'queued', true, 'fixture', 0, now() - interval '1 hour'
    FROM generate_series(1, @rows::integer) AS g
    RETURNING id
)
INSERT INTO gateway_task_admissions (task_id, scope_type, scope_key, limit_value)
SELECT id, 'fixture_queue', 'q' || (row_number() OVER () % 100)::text, 1000000
FROM tasks;

-- name: FixtureFillOpenOfRunning :exec
-- Gives each running task of FixtureFill @per_task open reservations and
-- as many live leases, of its running attempt, as busy workers hold: live
-- state in the proportion that made a custom plan hash the whole task table
-- rather than probe it (the books are not kept: only for plans).
-- Locks: row locks on the inserted rows only.
-- Index: gateway_tasks_running_idx (partial: running) or a sequential
-- scan of gateway_tasks; gateway_task_attempts_running_idx; the inserts
-- maintain every index.
WITH running AS (
    SELECT t.id, a.id AS attempt_id, g
    FROM gateway_tasks AS t
    JOIN gateway_task_attempts AS a ON a.task_id = t.id AND a.status = 'running'
    CROSS JOIN generate_series(1, @per_task::integer) AS g
    WHERE t.status = 'running'
      AND t.kind = 'fixture'
),
reservations AS (
    INSERT INTO gateway_rate_limit_reservations (
        task_id, attempt_id, scope_type, scope_key, metric, window_seconds, window_start, limit_value, reserved_amount
    )
    SELECT id, attempt_id, 'fixture_key', 'open-' || g::text, 'tokens', 3600,
           date_bin(interval '1 hour', now(), timestamptz 'epoch'), 1000000, 1
    FROM running
    RETURNING id
)
INSERT INTO gateway_concurrency_leases (task_id, attempt_id, scope_type, scope_key, lease_value, limit_value, expires_at)
SELECT id, attempt_id, 'fixture_model', 'open-' || g::text, 1, 1000000, now() + interval '1 hour'
FROM running;

-- name: FixtureAttachSettledToFinishedAttempts :exec
-- Attaches FixtureFill's settled reservations and released leases to its
-- finished attempts, one each, as a worker's admissions are: most rows
-- that name an attempt are then settled, and a planner that takes the two
-- tests of open attached rows (open, and attached) as independent
-- estimates them at a few percent of the table, not a few per ten thousand.
-- Locks: row locks on the updated rows.
-- Index: sequential scans of the three tables; the updates maintain every index.
WITH settled AS (
    SELECT r.id, row_number() OVER () AS n FROM gateway_rate_limit_reservations AS r WHERE r.status <> 'reserved'
),
released AS (
    SELECT l.id, row_number() OVER () AS n FROM gateway_concurrency_leases AS l WHERE l.released_at IS NOT NULL
),
finished AS (
    SELECT a.id, a.task_id, row_number() OVER () AS n FROM gateway_task_attempts AS a WHERE a.status <> 'running'
),
reservations AS (
    UPDATE gateway_rate_limit_reservations AS r
    SET task_id = f.task_id, attempt_id = f.id
    FROM settled AS s
    JOIN finished AS f ON f.n = s.n
    WHERE r.id = s.id
    RETURNING r.id
)
UPDATE gateway_concurrency_leases AS l
SET task_id = f.task_id, attempt_id = f.id
FROM released AS s
JOIN finished AS f ON f.n = s.n
WHERE l.id = s.id;

-- name: TablesAnalyze :exec
-- Refreshes planner statistics of every pgadmit table (after a bulk fill).
-- Locks: SHARE UPDATE EXCLUSIVE on each table (does not block reads or writes).
-- Index: none.
ANALYZE gateway_tasks, gateway_task_attempts, gateway_task_events, gateway_task_admissions,
    gateway_rate_limit_counters, gateway_rate_limit_reservations, gateway_concurrency_leases;

-- name: LedgersVacuumAnalyze :exec
-- Vacuums and analyzes the ledgers and their counters, as autovacuum does:
-- run when nothing is open, it records the partial indexes of open rows as
-- empty (reltuples 0), which the planner then believes until the next one.
-- Locks: SHARE UPDATE EXCLUSIVE on each table (does not block reads or writes).
-- Index: every index of each table (vacuumed).
VACUUM (ANALYZE) gateway_rate_limit_counters, gateway_rate_limit_reservations, gateway_concurrency_leases,
    gateway_rate_limit_allotments;

-- name: PlanCacheForceGeneric :exec
-- Makes the rest of the current transaction run every prepared statement
-- on its generic plan, as PostgreSQL does on its own after five executions
-- when it reckons the generic plan no costlier (pgx prepares each
-- statement once per connection and runs it for the connection's life).
-- Locks: none.
-- Index: none.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true);

-- name: JitForTransaction :exec
-- Turns JIT compilation on ('on') or off ('off') for the rest of the
-- current transaction, at a stock server's threshold (jit_above_cost
-- 100000): a statement the planner costs above it is compiled to machine
-- code on each execution, which takes tens to hundreds of milliseconds.
-- Locks: none.
-- Index: none.
SELECT set_config('jit', @jit::text, true), set_config('jit_above_cost', '100000', true);

-- name: TableScansInTransaction :many
-- How the statements run so far in the current transaction read each
-- pgadmit table: sequential scans of the table, scans of its indexes, and
-- index entries those scans read (the functions behind
-- pg_stat_xact_user_tables; idx_tup_read): a statement that probes its rows
-- by key reads a few entries, one that scans a partial index reads every
-- entry in it.
-- Locks: none.
-- Index: pg_class_relname_nsp_index (catalog).
SELECT t.relname::text                                                AS table_name,
       pg_stat_get_xact_numscans(t.oid)::bigint                       AS seq_scans,
       coalesce((SELECT sum(pg_stat_get_xact_numscans(i.indexrelid))
                 FROM pg_catalog.pg_index AS i
                 WHERE i.indrelid = t.oid), 0)::bigint                AS index_scans,
       coalesce((SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid))
                 FROM pg_catalog.pg_index AS i
                 WHERE i.indrelid = t.oid), 0)::bigint                AS index_entries_read
FROM pg_catalog.pg_class AS t
WHERE t.relkind = 'r'
  AND t.relnamespace = current_schema()::regnamespace
  AND t.relname::text LIKE 'gateway\_%'
ORDER BY t.relname;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Synthetic data for tests that need realistic table sizes (the index-use
-- test). Not for production databases.
