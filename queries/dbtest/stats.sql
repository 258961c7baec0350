-- name: TableRowCounts :one
-- Row count of every pgadmit table. Full scans: for tests and small
-- databases only, never on a hot path.
-- Locks: none (MVCC read).
-- Index: none (sequential scans).
SELECT (SELECT count(*) FROM gateway_tasks)::bigint                   AS tasks,
       (SELECT count(*) FROM gateway_task_attempts)::bigint           AS attempts,
       (SELECT count(*) FROM gateway_task_events)::bigint             AS events,
       (SELECT count(*) FROM gateway_task_admissions)::bigint         AS admissions,
       (SELECT count(*) FROM gateway_rate_limit_counters)::bigint     AS counters,
       (SELECT count(*) FROM gateway_rate_limit_reservations)::bigint AS reservations,
       (SELECT count(*) FROM gateway_concurrency_leases)::bigint      AS leases;

-- name: MaintenanceRowCounts :one
-- Row count of the tables TableRowCounts leaves out: blocks of Local
-- limits, maintenance leases and cursors. Full scans: for tests only.
-- Locks: none (MVCC read).
-- Index: none (sequential scans).
SELECT (SELECT count(*) FROM gateway_rate_limit_allotments)::bigint AS allotments,
       (SELECT count(*) FROM gateway_maintenance_leases)::bigint    AS maintenance_leases,
       (SELECT count(*) FROM gateway_maintenance_cursors)::bigint   AS maintenance_cursors;

-- name: LeaseLiveByScope :one
-- Live leases of one scope: how many rows and how many slots they hold.
-- Locks: none (MVCC read).
-- Index: gateway_concurrency_leases_live_scope_idx (index-only).
SELECT count(*)::bigint                            AS leases,
       coalesce(sum(lease_value), 0)::numeric      AS slots
FROM gateway_concurrency_leases
WHERE scope_type = @scope_type
  AND scope_key = @scope_key
  AND released_at IS NULL
  AND expires_at > now();

-- name: LeaseRowsByScope :many
-- Every lease row of one scope, live or not, by id: what a test compares
-- before and after an operation that must change nothing.
-- Locks: none (MVCC read).
-- Index: none (sequential scan): for tests only.
SELECT id, task_id, attempt_id, lease_value::numeric AS lease_value, limit_value::numeric AS limit_value,
       expires_at, released_at, coalesce(reason, '')::text AS reason
FROM gateway_concurrency_leases
WHERE scope_type = @scope_type
  AND scope_key = @scope_key
ORDER BY id;

-- name: CounterDecimalsByScope :many
-- The window counters of one scope, newest first, with their values as
-- numeric writes them: exact, where a float64 would round 5e14 and
-- 499999999999999.999999 alike.
-- Locks: none (MVCC read).
-- Index: gateway_rate_limit_counters_pkey (scope prefix).
SELECT c.metric, c.window_start,
       c.limit_value::text    AS limit_value,
       c.used_value::text     AS used_value,
       c.reserved_value::text AS reserved_value
FROM gateway_rate_limit_counters AS c
WHERE c.scope_type = @scope_type
  AND c.scope_key = @scope_key
ORDER BY c.window_start DESC, c.metric;

-- name: AllotmentListByScope :many
-- Every allotment (block of a Local limit) of one scope, oldest first.
-- Locks: none (MVCC read).
-- Index: none specific (filters on scope; for tests, inspect and small
-- scopes).
SELECT id, holder, metric, window_seconds, window_start, expires_at, limit_value, granted,
       consumed, created_at, returned_at, coalesce(used, 0)::numeric AS used, coalesce(reason, '')::text AS reason
FROM gateway_rate_limit_allotments
WHERE scope_type = @scope_type
  AND scope_key = @scope_key
ORDER BY created_at, id;

-- name: ReservationTotalsByScope :many
-- Per metric and window of one scope: open reservations (count, amount) and
-- committed actual amounts, i.e. what the counters should say.
-- Locks: none (MVCC read).
-- Index: none specific (filters on scope; for tests and small scopes).
SELECT metric, window_seconds, window_start,
       count(*) FILTER (WHERE status = 'reserved')::bigint                          AS open_count,
       coalesce(sum(reserved_amount) FILTER (WHERE status = 'reserved'), 0)::numeric AS open_amount,
       count(*) FILTER (WHERE status = 'committed')::bigint                         AS committed_count,
       coalesce(sum(actual_amount) FILTER (WHERE status = 'committed'), 0)::numeric  AS committed_amount
FROM gateway_rate_limit_reservations
WHERE scope_type = @scope_type
  AND scope_key = @scope_key
GROUP BY metric, window_seconds, window_start
ORDER BY window_start, metric, window_seconds;

-- name: ReservationsByReason :many
-- How many reservations of one scope have each status and release reason.
-- Locks: none (MVCC read).
-- Index: none specific (filters on scope; for tests and small scopes).
SELECT status, coalesce(reason, '')::text AS reason, count(*)::bigint AS reservations
FROM gateway_rate_limit_reservations
WHERE scope_type = @scope_type
  AND scope_key = @scope_key
GROUP BY status, reason
ORDER BY status, reason;

-- name: ReservationStatuses :many
-- The status of each reservation of @ids that exists (absent ones return no
-- row).
-- Locks: none (MVCC read).
-- Index: gateway_rate_limit_reservations_pkey.
SELECT id, status
FROM gateway_rate_limit_reservations
WHERE id = ANY (@ids::uuid[]);

-- name: SchemaObjectsWithoutComment :many
-- Tables, columns and indexes of pgadmit (gateway_*) that carry no COMMENT:
-- the schema promises a comment saying why each one exists.
-- Locks: none (catalog read).
-- Index: catalog indexes.
SELECT 'table'::text AS kind, c.relname::text AS name
FROM pg_catalog.pg_class AS c
WHERE c.relkind = 'r'
  AND c.relnamespace = current_schema()::regnamespace
  AND c.relname::text LIKE 'gateway\_%'
  AND obj_description(c.oid, 'pg_class') IS NULL
UNION ALL
SELECT 'column', c.relname::text || '.' || a.attname::text
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid
WHERE c.relkind = 'r'
  AND c.relnamespace = current_schema()::regnamespace
  AND c.relname::text LIKE 'gateway\_%'
  AND a.attnum > 0
  AND NOT a.attisdropped
  AND col_description(c.oid, a.attnum) IS NULL
UNION ALL
SELECT 'index', i.relname::text
FROM pg_catalog.pg_class AS i
JOIN pg_catalog.pg_index AS x ON x.indexrelid = i.oid
JOIN pg_catalog.pg_class AS c ON c.oid = x.indrelid
WHERE c.relnamespace = current_schema()::regnamespace
  AND c.relname::text LIKE 'gateway\_%'
  AND obj_description(i.oid, 'pg_class') IS NULL
ORDER BY 1, 2;

-- name: MaintenanceLeaseList :many
-- Every maintenance lease held now, by job: who holds it until when.
-- Locks: none (MVCC read).
-- Index: gateway_maintenance_leases_pkey (order).
SELECT l.name, l.holder, l.acquired_at, l.expires_at
FROM gateway_maintenance_leases AS l
ORDER BY l.name;

-- name: AdvisoryLocksHeld :many
-- Advisory locks granted in the current database to other backends, and
-- whether their backend is outside any transaction (then the lock is a
-- session-level one left behind): pgadmit must leave none.
-- Locks: none.
-- Index: none (pg_locks is an in-memory view).
SELECT l.pid::integer                                                  AS pid,
       ((l.classid::bigint << 32) | l.objid::bigint)::bigint           AS lock_key,
       (NOT EXISTS (SELECT 1
                    FROM pg_catalog.pg_stat_activity AS a
                    WHERE a.pid = l.pid
                      AND a.xact_start IS NOT NULL))::boolean             AS outside_transaction
FROM pg_catalog.pg_locks AS l
WHERE l.locktype = 'advisory'
  AND l.granted
  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())
  AND l.pid <> pg_backend_pid()
ORDER BY l.pid, lock_key;

-- name: AmountScales :one
-- The most digits after the decimal point that any stored amount has, in
-- the counters and in the reservation ledger: validation keeps it bounded.
-- Locks: none (MVCC read).
-- Index: none (sequential scans; for tests).
SELECT coalesce((SELECT max(greatest(scale(c.used_value), scale(c.reserved_value), scale(c.limit_value)))
                 FROM gateway_rate_limit_counters AS c), 0)::integer AS counters,
       coalesce((SELECT max(greatest(scale(r.reserved_amount), coalesce(scale(r.actual_amount), 0), scale(r.limit_value)))
                 FROM gateway_rate_limit_reservations AS r), 0)::integer AS reservations;

-- name: SchemaRoutines :many
-- Every pgadmit_* function and procedure: its signature, its whole
-- definition and its COMMENT, so that a migration's Down can be checked to
-- restore them exactly.
-- Locks: none (catalog read).
-- Index: catalog indexes (pg_proc by namespace).
SELECT p.oid::regprocedure::text                       AS signature,
       pg_catalog.pg_get_functiondef(p.oid)::text      AS definition,
       coalesce(obj_description(p.oid, 'pg_proc'), '')::text AS comment
FROM pg_catalog.pg_proc AS p
WHERE p.pronamespace = current_schema()::regnamespace
  AND p.proname::text LIKE 'pgadmit\_%'
ORDER BY 1;

-- name: ColumnComment :one
-- The COMMENT of one column of a table of the current schema (empty when none).
-- Locks: none (catalog read).
-- Index: catalog indexes.
SELECT coalesce(col_description(c.oid, a.attnum), '')::text AS comment
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid
WHERE c.relnamespace = current_schema()::regnamespace
  AND c.relname::text = @table_name::text
  AND a.attname::text = @column_name::text;

-- name: LedgerMismatchesByScope :many
-- The counters of one scope whose values differ from their ledger, summed
-- exactly (numeric): reserved_value against the open reservations' amounts
-- and the open blocks' granted units, used_value against the committed
-- reservations' actual amounts and the returned blocks' used units. What
-- Doctor checks, for one scope, without the float arithmetic of adding the
-- two ledgers up in Go.
-- Locks: none (MVCC read).
-- Index: none specific (filters on scope; for tests and small scopes).
WITH ledger AS (
    SELECT r.metric, r.window_seconds, r.window_start,
           coalesce(sum(r.reserved_amount) FILTER (WHERE r.status = 'reserved'), 0) AS open_amount,
           coalesce(sum(r.actual_amount) FILTER (WHERE r.status = 'committed'), 0) AS committed_amount
    FROM gateway_rate_limit_reservations AS r
    WHERE r.scope_type = @scope_type AND r.scope_key = @scope_key
    GROUP BY r.metric, r.window_seconds, r.window_start
    UNION ALL
    SELECT a.metric, a.window_seconds, a.window_start,
           coalesce(sum(a.granted) FILTER (WHERE a.returned_at IS NULL), 0),
           coalesce(sum(a.used) FILTER (WHERE a.returned_at IS NOT NULL), 0)
    FROM gateway_rate_limit_allotments AS a
    WHERE a.scope_type = @scope_type AND a.scope_key = @scope_key
    GROUP BY a.metric, a.window_seconds, a.window_start
),
totals AS (
    SELECT l.metric, l.window_seconds, l.window_start,
           sum(l.open_amount) AS open_amount, sum(l.committed_amount) AS committed_amount
    FROM ledger AS l
    GROUP BY l.metric, l.window_seconds, l.window_start
)
SELECT c.metric, c.window_seconds, c.window_start,
       c.used_value, c.reserved_value,
       coalesce(t.committed_amount, 0)::numeric AS committed_amount,
       coalesce(t.open_amount, 0)::numeric      AS open_amount
FROM gateway_rate_limit_counters AS c
LEFT JOIN totals AS t
       ON t.metric = c.metric AND t.window_seconds = c.window_seconds AND t.window_start = c.window_start
WHERE c.scope_type = @scope_type
  AND c.scope_key = @scope_key
  AND (c.reserved_value <> coalesce(t.open_amount, 0) OR c.used_value <> coalesce(t.committed_amount, 0))
ORDER BY c.window_start, c.metric, c.window_seconds;

-- name: TupleWritesInTransaction :many
-- How many rows the statements run so far in the current transaction
-- updated and deleted in each pgadmit table, those of foreign-key actions
-- and triggers included (the functions behind pg_stat_xact_user_tables:
-- n_tup_upd, n_tup_del, n_tup_hot_upd): a row updated twice counts twice.
-- hot_updated: those of the updates that were heap-only (HOT): no column
-- any index names changed and the new version fit on the row's page, so no
-- index was written.
-- Locks: none.
-- Index: pg_class_relname_nsp_index (catalog).
SELECT t.relname::text                                      AS table_name,
       pg_stat_get_xact_tuples_updated(t.oid)::bigint       AS updated,
       pg_stat_get_xact_tuples_deleted(t.oid)::bigint       AS deleted,
       pg_stat_get_xact_tuples_hot_updated(t.oid)::bigint   AS hot_updated
FROM pg_catalog.pg_class AS t
WHERE t.relkind = 'r'
  AND t.relnamespace = current_schema()::regnamespace
  AND t.relname::text LIKE 'gateway\_%'
ORDER BY t.relname;

-- name: SessionStateLeft :one
-- What this session holds beyond its transaction: settings changed for the
-- session (SET, set_config(..., false); a start-up parameter's source is
-- client, a function's SET clause ends with the call), prepared statements,
-- LISTEN channels, open cursors (WITH HOLD; the unnamed portal is this
-- statement's own), advisory locks (outside a
-- transaction block only a session-level one is held past its statement)
-- and temporary relations. Behind a transaction pooler the next client of
-- the server session would inherit all of it (PgBouncer runs no
-- server_reset_query in transaction mode): pgadmit must leave none.
-- Locks: none.
-- Index: none (in-memory views of this session).
SELECT coalesce((SELECT pg_catalog.array_agg(s.name || ' = ' || s.setting ORDER BY s.name)
                 FROM pg_catalog.pg_settings AS s
                 WHERE s.source = 'session'), '{}')::text[]                  AS settings,
       coalesce((SELECT pg_catalog.array_agg(p.name ORDER BY p.name)
                 FROM pg_catalog.pg_prepared_statements AS p), '{}')::text[] AS prepared_statements,
       coalesce((SELECT pg_catalog.array_agg(c.channel ORDER BY c.channel)
                 FROM pg_catalog.pg_listening_channels() AS c (channel)), '{}')::text[] AS listening_channels,
       coalesce((SELECT pg_catalog.array_agg(k.name ORDER BY k.name)
                 FROM pg_catalog.pg_cursors AS k
                 WHERE k.name <> ''), '{}')::text[]                            AS cursors,
       (SELECT pg_catalog.count(*)
        FROM pg_catalog.pg_locks AS l
        WHERE l.pid = pg_catalog.pg_backend_pid()
          AND l.locktype = 'advisory')::bigint                            AS advisory_locks,
       coalesce((SELECT pg_catalog.array_agg(r.relname::text ORDER BY r.relname)
                 FROM pg_catalog.pg_class AS r
                 WHERE r.relnamespace = pg_catalog.pg_my_temp_schema()), '{}')::text[] AS temp_relations;

-- name: SessionPreparedCallsRun :one
-- How many of the statements this session holds prepared call the
-- function @function_name (its name, then an opening parenthesis) and were
-- planned at least once, so run: those of pgadmit's statements that pgx, in
-- its default exec mode (cache_statement), prepared and ran on this
-- connection.
-- Locks: none.
-- Index: none (pg_prepared_statements lists this session's statements).
SELECT count(*)::bigint AS prepared
FROM pg_catalog.pg_prepared_statements AS s
WHERE pg_catalog.strpos(s.statement, @function_name::text || '(') > 0
  AND s.generic_plans + s.custom_plans > 0;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Read-only views of the books for tests: row counts, per-scope ledger
-- totals, live leases of a scope, the schema's comments. Full scans: never
-- on a production path.
