-- name: InspectWindows :many
-- Counters of the windows that have not ended yet (reset_at > now()), with
-- the time left until each resets on the database's clock.
-- Locks: none (plain MVCC read).
-- Index: gateway_rate_limit_counters_reset_idx (reset_at > now()) without a
-- scope, unless the planner reckons many windows running: then
-- gateway_rate_limit_counters_pkey read whole in its order, which spares
-- the sort but reads every counter kept (it did with 74,000 counters
-- just after an ANALYZE); with a scope,
-- gateway_rate_limit_counters_pkey (scope prefix) when many windows are
-- running, else still reset_idx, filtered on the scope (few windows
-- running: as cheap).
SELECT c.scope_type,
       c.scope_key,
       c.metric,
       c.window_seconds,
       c.window_start,
       c.reset_at,
       -- The amounts as numeric's text, exactly, without trailing zeros (a
       -- sum keeps its terms' scale: 0.5 + 0.5 is 1.0): numeric sums of
       -- amounts may need more digits than a float64 holds (1e14 + 1e-9 is
       -- 100000000000000.000000001), and the room left in float64 would
       -- have been inexact too (1 - 0.9 as 0.09999999999999998).
       pg_catalog.trim_scale(c.limit_value)::text                                      AS limit_value,
       pg_catalog.trim_scale(c.used_value)::text                                       AS used_value,
       pg_catalog.trim_scale(c.reserved_value)::text                                   AS reserved_value,
       pg_catalog.trim_scale(greatest(c.limit_value - c.used_value - c.reserved_value, 0))::text AS free_value,
       extract(epoch FROM c.reset_at - now())::float8 AS reset_in_seconds,
       count(*) OVER ()                               AS total_rows
FROM gateway_rate_limit_counters AS c
WHERE c.reset_at > now()
  AND (sqlc.narg('scope_type')::text IS NULL
       OR (c.scope_type = sqlc.narg('scope_type')::text AND c.scope_key = sqlc.narg('scope_key')::text))
ORDER BY c.scope_type, c.scope_key, c.metric, c.window_seconds
LIMIT @max_rows::integer;

-- name: InspectLeases :many
-- Unreleased concurrency leases per scope: how many slots are live, how many
-- leases expired without being released (recovery's work), the limit of the
-- latest lease and the time until the next live lease expires.
-- Locks: none (plain MVCC read).
-- Index: a partial index of unreleased leases (live state), read whole
-- and filtered on the scope: gateway_concurrency_leases_live_scope_idx or
-- gateway_concurrency_leases_live_task_idx, as their sizes go; live_scope_idx's
-- (scope_type, scope_key) prefix only when live leases are many.
SELECT l.scope_type,
       l.scope_key,
       (count(*) FILTER (WHERE l.expires_at > now()))::bigint                 AS live_leases,
       -- Amounts as numeric's text, exactly (as InspectWindows).
       pg_catalog.trim_scale(coalesce(sum(l.lease_value) FILTER (WHERE l.expires_at > now()), 0))::text AS live_value,
       (count(*) FILTER (WHERE l.expires_at <= now()))::bigint                AS expired_leases,
       pg_catalog.trim_scale((pg_catalog.array_agg(l.limit_value ORDER BY l.created_at DESC))[1])::text AS limit_value,
       coalesce(extract(epoch FROM min(l.expires_at) FILTER (WHERE l.expires_at > now()) - now()), 0)::float8
                                                                             AS next_expiry_in_seconds,
       count(*) OVER ()                                                      AS total_rows
FROM gateway_concurrency_leases AS l
WHERE l.released_at IS NULL
  AND (sqlc.narg('scope_type')::text IS NULL
       OR (l.scope_type = sqlc.narg('scope_type')::text AND l.scope_key = sqlc.narg('scope_key')::text))
GROUP BY l.scope_type, l.scope_key
ORDER BY l.scope_type, l.scope_key
LIMIT @max_rows::integer;

-- name: InspectAdmissions :many
-- Queue admissions (queue_size limits) per scope: admitted tasks by status
-- of their task, the limit of the latest admission and the age of the oldest.
-- Locks: none (plain MVCC read).
-- Index: gateway_task_admissions_scope_idx (scope prefix) when a scope is
-- given; gateway_tasks_pkey to read each admitted task's status, unless
-- the admissions are many: the planner may then hash-join a sequential scan
-- of gateway_tasks (it did with 8,000 admissions of 200,000 tasks).
SELECT a.scope_type,
       a.scope_key,
       count(*)::bigint                                                      AS admitted,
       (count(*) FILTER (WHERE t.status = 'queued'))::bigint                 AS queued,
       (count(*) FILTER (WHERE t.status = 'running'))::bigint                AS running,
       (count(*) FILTER (WHERE t.status NOT IN ('queued', 'running')))::bigint AS finished,
       -- As numeric's text, exactly (as InspectWindows).
       pg_catalog.trim_scale((pg_catalog.array_agg(a.limit_value ORDER BY a.created_at DESC))[1])::text AS limit_value,
       extract(epoch FROM now() - min(a.created_at))::float8                 AS oldest_age_seconds,
       count(*) OVER ()                                                      AS total_rows
FROM gateway_task_admissions AS a
JOIN gateway_tasks AS t ON t.id = a.task_id
WHERE sqlc.narg('scope_type')::text IS NULL
   OR (a.scope_type = sqlc.narg('scope_type')::text AND a.scope_key = sqlc.narg('scope_key')::text)
GROUP BY a.scope_type, a.scope_key
ORDER BY a.scope_type, a.scope_key
LIMIT @max_rows::integer;

-- name: InspectTasksHolding :one
-- What a set of tasks still holds: how many are unfinished (and how many of
-- those are running on an expired execution lease, i.e. await recovery),
-- their open reservations and their unreleased and live concurrency leases.
-- The demo watches a killed instance's tasks with it.
-- Locks: none (plain MVCC read).
-- Index: gateway_tasks_pkey (the expired count may read
-- gateway_tasks_running_idx instead, filtered on the ids and the expiry);
-- gateway_rate_limit_reservations_open_task_idx;
-- gateway_concurrency_leases_live_task_idx.
SELECT (SELECT count(*)
        FROM gateway_tasks AS t
        WHERE t.id = ANY(@task_ids::uuid[])
          AND t.status IN ('queued', 'running'))::bigint                    AS unfinished_tasks,
       (SELECT count(*)
        FROM gateway_tasks AS t
        WHERE t.id = ANY(@task_ids::uuid[])
          AND t.status = 'running'
          AND t.execution_lease_expires_at <= now())::bigint                AS expired_tasks,
       (SELECT count(*)
        FROM gateway_rate_limit_reservations AS r
        WHERE r.task_id = ANY(@task_ids::uuid[])
          AND r.status = 'reserved')::bigint                                AS open_reservations,
       (SELECT count(*)
        FROM gateway_concurrency_leases AS l
        WHERE l.task_id = ANY(@task_ids::uuid[])
          AND l.released_at IS NULL)::bigint                                AS unreleased_leases,
       (SELECT count(*)
        FROM gateway_concurrency_leases AS l
        WHERE l.task_id = ANY(@task_ids::uuid[])
          AND l.released_at IS NULL
          AND l.expires_at > now())::bigint                                 AS live_leases;

-- name: InspectTasksByOutcome :many
-- Counts a set of tasks by status and error code (a NULL error code as the
-- empty string), most frequent first: the demo's summary of how its
-- requests ended.
-- Locks: none (plain MVCC read).
-- Index: gateway_tasks_pkey (one probe per id).
SELECT t.status,
       coalesce(t.error_code, '')::text AS error_code,
       count(*)::bigint                 AS tasks
FROM gateway_tasks AS t
WHERE t.id = ANY(@task_ids::uuid[])
GROUP BY t.status, t.error_code
ORDER BY tasks DESC, t.status, error_code;

-- name: CounterListByScope :many
-- Every window counter of one scope, newest window first.
-- Locks: none (MVCC read).
-- Index: gateway_rate_limit_counters_pkey (leading scope_type, scope_key).
SELECT scope_type, scope_key, metric, window_seconds, window_start, reset_at,
       limit_value, used_value, reserved_value
FROM gateway_rate_limit_counters
WHERE scope_type = @scope_type
  AND scope_key = @scope_key
ORDER BY window_start DESC, metric, window_seconds;

-- name: InspectAllotments :many
-- Open allotments (blocks of Local limits) per holder and counter window:
-- how many blocks, the units they hold in the counter, what their holder
-- last reported admitting from them and when, and the time until their
-- window ends on the database's clock (negative: it ended, and the blocks
-- were not returned). A holder's blocks of an ended window are a row apart
-- from those of the current one, not summed with them.
-- Locks: none (plain MVCC read).
-- Index: gateway_rate_limit_allotments_open_idx (partial: open blocks, live
-- state).
SELECT a.holder,
       a.scope_type,
       a.scope_key,
       a.metric,
       a.window_seconds,
       count(*)::bigint                                                  AS blocks,
       -- Amounts as numeric's text, exactly (as InspectWindows).
       pg_catalog.trim_scale(sum(a.granted))::text                       AS granted,
       pg_catalog.trim_scale(sum(a.consumed))::text                      AS consumed,
       extract(epoch FROM now() - max(a.synced_at))::float8              AS reported_ago_seconds,
       extract(epoch FROM min(a.expires_at) - now())::float8             AS ends_in_seconds,
       count(*) OVER ()                                                  AS total_rows
FROM gateway_rate_limit_allotments AS a
WHERE a.returned_at IS NULL
  AND (sqlc.narg('scope_type')::text IS NULL
       OR (a.scope_type = sqlc.narg('scope_type')::text AND a.scope_key = sqlc.narg('scope_key')::text))
GROUP BY a.holder, a.scope_type, a.scope_key, a.metric, a.window_seconds, a.window_start
ORDER BY a.scope_type, a.scope_key, a.metric, a.window_seconds, a.window_start, a.holder
LIMIT @max_rows::integer;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Read-only views for `pgadmit inspect`: what the limits hold right now.
--
-- None of these statements writes or locks anything; they are plain MVCC
-- reads, safe to run against a busy production database. inspect runs its
-- four (windows, leases, admissions, allotments) in one READ ONLY REPEATABLE
-- READ transaction, so that they share one snapshot and one now(). Each returns at
-- most @max_rows rows, plus the total number of matching rows (total_rows,
-- the same on every row) so the operator knows what was cut. An optional
-- scope (both scope_type and scope_key, or neither) narrows each view to
-- one scope.
--
-- Amounts (limits, used, reserved, free, slots, granted, admitted) come back
-- as numeric's text, exactly and without trailing zeros, not as float64: a
-- window's sums are exact in numeric and may need more digits than a
-- float64 holds (CounterListByScope, for tests and the demo, reads them as
-- float64).
