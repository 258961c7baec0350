-- Admission: the statement that decides and records a reservation across
-- window counters and concurrency leases.

-- name: ReserveApply :many
-- All or nothing. Runs after CounterEnsureWindows, CounterLockWindows and
-- LeaseLockScopes in the same READ COMMITTED transaction, so every value it
-- reads is current and stays so until commit (refusal 'isolation' in any
-- other level). A task id must name a queued or running task and an attempt
-- id a running attempt (refusals unknown_task, task_finished,
-- unknown_attempt, attempt_finished). When every limit fits, it adds each window
-- amount to its counter's reserved_value, records one reservation per window
-- limit and one lease per concurrency limit; when any limit does not fit it
-- writes nothing. Either way it returns one row per limit (window limits
-- first, each kind in input order) with the values the decision used and the
-- database's now(), so a refusal is explained on the database's clock.
-- Locks: updates the counter rows already locked; inserts reservation and
-- lease rows (FK share locks on the task and attempt rows, if given).
-- Index: gateway_rate_limit_counters_pkey for the counters;
-- gateway_concurrency_leases_live_scope_idx (index-only) for live leases.
WITH win AS (
    SELECT w.ord,
           w.scope_type,
           w.scope_key,
           w.metric,
           w.window_seconds,
           w.limit_value,
           w.amount,
           c.window_start,
           c.reset_at,
           c.used_value,
           c.reserved_value,
           (c.used_value + c.reserved_value + w.amount <= w.limit_value) AS fits
    FROM (
        SELECT generate_subscripts(@w_scope_types::text[], 1) AS ord,
               unnest(@w_scope_types::text[])       AS scope_type,
               unnest(@w_scope_keys::text[])        AS scope_key,
               unnest(@w_metrics::text[])           AS metric,
               unnest(@w_window_seconds::integer[]) AS window_seconds,
               unnest(@w_limit_values::numeric[])   AS limit_value,
               unnest(@w_amounts::numeric[])        AS amount
    ) AS w
    CROSS JOIN LATERAL (
        SELECT counter.window_start, counter.reset_at, counter.used_value, counter.reserved_value
        FROM gateway_rate_limit_counters AS counter
        WHERE counter.scope_type = w.scope_type
          AND counter.scope_key = w.scope_key
          AND counter.metric = w.metric
          AND counter.window_seconds = w.window_seconds
          AND counter.window_start = date_bin(make_interval(secs => w.window_seconds), now(), timestamptz 'epoch')
        LIMIT 1 -- one row (primary key); also keeps the probe from being flattened into a hash join
    ) AS c
),
con AS (
    SELECT l.ord,
           l.scope_type,
           l.scope_key,
           l.limit_value,
           l.amount,
           l.ttl_seconds,
           live.active,
           live.next_expiry,
           (live.active + l.amount <= l.limit_value) AS fits
    FROM (
        SELECT generate_subscripts(@c_scope_types::text[], 1) AS ord,
               unnest(@c_scope_types::text[])     AS scope_type,
               unnest(@c_scope_keys::text[])      AS scope_key,
               unnest(@c_limit_values::numeric[]) AS limit_value,
               unnest(@c_amounts::numeric[])      AS amount,
               unnest(@c_ttl_seconds::integer[])  AS ttl_seconds
    ) AS l
    CROSS JOIN LATERAL (
        SELECT coalesce(sum(x.lease_value), 0) AS active,
               min(x.expires_at)               AS next_expiry
        FROM gateway_concurrency_leases AS x
        WHERE x.scope_type = l.scope_type
          AND x.scope_key = l.scope_key
          AND x.released_at IS NULL
          AND x.expires_at > now()
    ) AS live
),
guard AS (
    -- Preconditions that refuse the whole admission before any limit is
    -- looked at: the reads above are exact only in READ COMMITTED (each
    -- statement sees what the previous lock holder committed), and capacity
    -- may be taken only for a live task and a running attempt, so that a
    -- worker whose task was reclaimed cannot hold capacity nobody recovers.
    SELECT CASE
               WHEN current_setting('transaction_isolation') <> 'read committed' THEN 'isolation'
               WHEN sqlc.narg('task_id')::uuid IS NOT NULL AND NOT EXISTS (
                        SELECT 1 FROM gateway_tasks AS t WHERE t.id = sqlc.narg('task_id')::uuid)
                   THEN 'unknown_task'
               WHEN sqlc.narg('task_id')::uuid IS NOT NULL AND NOT EXISTS (
                        SELECT 1 FROM gateway_tasks AS t
                        WHERE t.id = sqlc.narg('task_id')::uuid AND t.status IN ('queued', 'running'))
                   THEN 'task_finished'
               WHEN sqlc.narg('attempt_id')::uuid IS NOT NULL AND NOT EXISTS (
                        SELECT 1 FROM gateway_task_attempts AS a
                        WHERE a.id = sqlc.narg('attempt_id')::uuid
                          AND (sqlc.narg('task_id')::uuid IS NULL OR a.task_id = sqlc.narg('task_id')::uuid))
                   THEN 'unknown_attempt'
               WHEN sqlc.narg('attempt_id')::uuid IS NOT NULL AND NOT EXISTS (
                        SELECT 1 FROM gateway_task_attempts AS a
                        WHERE a.id = sqlc.narg('attempt_id')::uuid AND a.status = 'running')
                   THEN 'attempt_finished'
               ELSE ''
           END AS refusal
),
verdict AS (
    SELECT (SELECT refusal FROM guard) = ''
           AND (SELECT count(*) FROM win) = coalesce(cardinality(@w_scope_types::text[]), 0)
           AND NOT EXISTS (SELECT 1 FROM win WHERE NOT win.fits)
           AND NOT EXISTS (SELECT 1 FROM con WHERE NOT con.fits) AS admitted
),
bumped AS (
    UPDATE gateway_rate_limit_counters AS c
    SET reserved_value = c.reserved_value + win.amount,
        limit_value = win.limit_value,
        updated_at = now()
    FROM win, verdict
    WHERE verdict.admitted
      -- Redundant with the join below, but lets the planner probe the primary
      -- key for the few rows wanted instead of hashing the whole table.
      AND c.scope_type = ANY(@w_scope_types::text[])
      AND c.scope_key = ANY(@w_scope_keys::text[])
      AND c.scope_type = win.scope_type
      AND c.scope_key = win.scope_key
      AND c.metric = win.metric
      AND c.window_seconds = win.window_seconds
      AND c.window_start = win.window_start
    RETURNING c.scope_type
),
reserved AS (
    INSERT INTO gateway_rate_limit_reservations (
        task_id, attempt_id, scope_type, scope_key, metric, window_seconds, window_start,
        limit_value, reserved_amount
    )
    SELECT sqlc.narg('task_id')::uuid,
           sqlc.narg('attempt_id')::uuid,
           win.scope_type,
           win.scope_key,
           win.metric,
           win.window_seconds,
           win.window_start,
           win.limit_value,
           win.amount
    FROM win, verdict
    WHERE verdict.admitted
    RETURNING id, scope_type, scope_key, metric, window_seconds
),
leased AS (
    INSERT INTO gateway_concurrency_leases (
        task_id, attempt_id, scope_type, scope_key, lease_value, limit_value, expires_at
    )
    SELECT sqlc.narg('task_id')::uuid,
           sqlc.narg('attempt_id')::uuid,
           con.scope_type,
           con.scope_key,
           con.amount,
           con.limit_value,
           now() + make_interval(secs => con.ttl_seconds)
    FROM con, verdict
    WHERE verdict.admitted
    RETURNING id, scope_type, scope_key, expires_at
)
SELECT false                         AS is_lease,
       win.ord::integer              AS ord,
       win.fits::boolean             AS fits,
       reserved.id                   AS grant_id,
       win.used_value::numeric       AS used_value,
       win.reserved_value::numeric   AS reserved_value,
       win.window_start::timestamptz AS window_start,
       win.reset_at::timestamptz     AS reset_at,
       now()::timestamptz            AS db_now,
       (SELECT refusal FROM guard)::text AS refusal
FROM win
LEFT JOIN reserved
  ON reserved.scope_type = win.scope_type
 AND reserved.scope_key = win.scope_key
 AND reserved.metric = win.metric
 AND reserved.window_seconds = win.window_seconds
UNION ALL
SELECT true,
       con.ord::integer,
       con.fits::boolean,
       leased.id,
       con.active::numeric,
       0::numeric,
       now()::timestamptz,
       coalesce(leased.expires_at, con.next_expiry, now() + make_interval(secs => con.ttl_seconds))::timestamptz,
       now()::timestamptz,
       (SELECT refusal FROM guard)::text
FROM con
LEFT JOIN leased
  ON leased.scope_type = con.scope_type
 AND leased.scope_key = con.scope_key
ORDER BY is_lease, ord;
