-- name: DoctorCheck :many
-- Lists every problem found, at most @max_problems of them, ordered by kind,
-- or, when there is none, one row whose kind is empty (and every other column
-- as for a kind it does not apply to, expected and actual 0, their texts
-- "0"); expected_text and actual_text are expected and actual as numeric's
-- text, exact where the numeric columns' float64s may round; every row
-- carries checked_at, @now or the statement's now(), the time of the
-- snapshot it read. The kinds:
--   counter_reserved_mismatch: a counter's reserved_value is not the sum of
--     its open reservations' amounts and its open allotments' granted units
--     (expected = that sum);
--   counter_used_mismatch: a counter's used_value is not the sum of its
--     committed reservations' actual amounts and its returned allotments'
--     used amounts (expected = that sum);
--   allotment_outlived_window: an allotment still open although its window
--     ended, and its holder stopped reporting, more than
--     @allotment_grace_seconds ago (its holder is gone; recovery returns it;
--     actual its granted units);
--   open_reservation_without_counter: an open reservation whose counter
--     row does not exist (its amount is held nowhere);
--   open_allotment_without_counter: the same of an open allotment (its
--     granted units are held nowhere; its return charges nothing);
--   reservation_life_cycle_broken: a reservation whose status, finalized_at
--     and actual_amount disagree (reserved: neither set; committed: both;
--     released: finalized_at only); actual the actual amount;
--   open_reservation_of_finished_task, live_lease_of_finished_task,
--   admission_of_finished_task, running_attempt_of_finished_task: a
--     finished task still holds capacity or looks alive (recovery frees
--     these; expected 0, actual the amount held);
--   open_reservation_of_finished_attempt, live_lease_of_finished_attempt:
--     an attempt that is over (failed by recovery, say, while its worker
--     was still admitting) still holds capacity, and its task is not
--     finished (those are reported as of a finished task); attempt_id
--     names the attempt (recovery frees these; expected 0, actual the
--     amount held).
-- Columns that do not apply to a kind are empty (text), 0 (window_seconds),
-- the epoch (window_start) or NULL (ids, task_status). A lease is live
-- until @now (NULL: the database's now()).
-- Locks: none (MVCC read).
-- Index: sequential scans of counters, reservations and allotments (the
-- ledger sums, sorted or hashed by counter: they may spill to disk past
-- work_mem) and of reservations again (the life-cycle check);
-- gateway_rate_limit_allotments_open_idx for lost allotments; the partial
-- open indexes and gateway_rate_limit_counters_pkey for the open rows
-- without a counter, whose LEFT JOIN for the task status the planner may
-- make a hash of a sequential scan of gateway_tasks, before the anti-join
-- (it did with 100,000 tasks and 2,200 open rows); the partial
-- open/live indexes and gateway_tasks_pkey for the reservations and leases
-- of finished tasks; for their queue admissions and running attempts the
-- planner may hash-join a sequential scan of gateway_tasks instead of
-- probing it (it did with 200,000 tasks and 8,000 admissions), and so for
-- the reservations and leases of finished tasks and the finished-attempt
-- checks (it did with 20,000 tasks and 2,000 open reservations); the partial
-- attempt_id indexes and gateway_task_attempts_pkey for the
-- finished-attempt checks.
WITH entries AS (
    -- The ledger of every counter: reservations (open: their amount is
    -- reserved; committed: their actual amount is used) and allotments
    -- (open: their granted units are reserved; returned: what their holder
    -- admitted is used).
    SELECT r.scope_type, r.scope_key, r.metric, r.window_seconds, r.window_start,
           CASE WHEN r.status = 'reserved' THEN r.reserved_amount ELSE 0 END AS open_amount,
           CASE WHEN r.status = 'committed' THEN r.actual_amount ELSE 0 END AS committed_amount
    FROM gateway_rate_limit_reservations AS r
    UNION ALL
    SELECT a.scope_type, a.scope_key, a.metric, a.window_seconds, a.window_start,
           CASE WHEN a.returned_at IS NULL THEN a.granted ELSE 0 END,
           coalesce(a.used, 0)
    FROM gateway_rate_limit_allotments AS a
),
ledger AS (
    SELECT e.scope_type,
           e.scope_key,
           e.metric,
           e.window_seconds,
           e.window_start,
           coalesce(sum(e.open_amount), 0)      AS open_amount,
           coalesce(sum(e.committed_amount), 0) AS committed_amount
    FROM entries AS e
    GROUP BY e.scope_type, e.scope_key, e.metric, e.window_seconds, e.window_start
),
books AS (
    SELECT c.scope_type,
           c.scope_key,
           c.metric,
           c.window_seconds,
           c.window_start,
           c.reserved_value,
           c.used_value,
           coalesce(l.open_amount, 0)      AS open_amount,
           coalesce(l.committed_amount, 0) AS committed_amount
    FROM gateway_rate_limit_counters AS c
    LEFT JOIN ledger AS l
      ON l.scope_type = c.scope_type
     AND l.scope_key = c.scope_key
     AND l.metric = c.metric
     AND l.window_seconds = c.window_seconds
     AND l.window_start = c.window_start
),
problems AS (
    SELECT 'counter_reserved_mismatch'::text AS kind,
           b.scope_type::text                AS scope_type,
           b.scope_key::text                 AS scope_key,
           b.metric::text                    AS metric,
           b.window_seconds::integer         AS window_seconds,
           b.window_start::timestamptz       AS window_start,
           NULL::uuid                        AS task_id,
           NULL::text                        AS task_status,
           NULL::uuid                        AS row_id,
           NULL::uuid                        AS attempt_id,
           b.open_amount::numeric            AS expected,
           b.reserved_value::numeric         AS actual
    FROM books AS b
    WHERE b.reserved_value <> b.open_amount
    UNION ALL
    SELECT 'counter_used_mismatch', b.scope_type, b.scope_key, b.metric, b.window_seconds,
           b.window_start, NULL, NULL, NULL, NULL, b.committed_amount, b.used_value
    FROM books AS b
    WHERE b.used_value <> b.committed_amount
    UNION ALL
    SELECT o.kind, o.scope_type, o.scope_key, o.metric, o.window_seconds, o.window_start,
           o.task_id, t.status, o.id, NULL, 0, o.amount
    FROM (
        -- What is open in a window: its counter must exist.
        SELECT 'open_reservation_without_counter' AS kind, r.scope_type, r.scope_key, r.metric,
               r.window_seconds, r.window_start, r.task_id, r.id, r.reserved_amount AS amount
        FROM gateway_rate_limit_reservations AS r
        WHERE r.status = 'reserved'
        UNION ALL
        SELECT 'open_allotment_without_counter', a.scope_type, a.scope_key, a.metric,
               a.window_seconds, a.window_start, NULL, a.id, a.granted
        FROM gateway_rate_limit_allotments AS a
        WHERE a.returned_at IS NULL
    ) AS o
    LEFT JOIN gateway_tasks AS t ON t.id = o.task_id
    WHERE NOT EXISTS (
        SELECT 1
        FROM gateway_rate_limit_counters AS c
        WHERE c.scope_type = o.scope_type
          AND c.scope_key = o.scope_key
          AND c.metric = o.metric
          AND c.window_seconds = o.window_seconds
          AND c.window_start = o.window_start
    )
    UNION ALL
    SELECT 'allotment_outlived_window', a.scope_type, a.scope_key, a.metric,
           a.window_seconds, a.window_start, NULL, NULL, a.id, NULL, 0, a.granted
    FROM gateway_rate_limit_allotments AS a
    WHERE a.returned_at IS NULL
      AND a.expires_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @allotment_grace_seconds::float8)
      AND a.synced_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @allotment_grace_seconds::float8)
    UNION ALL
    SELECT 'reservation_life_cycle_broken', r.scope_type, r.scope_key, r.metric,
           r.window_seconds, r.window_start, r.task_id, NULL, r.id, NULL, 0, coalesce(r.actual_amount, 0)
    FROM gateway_rate_limit_reservations AS r
    WHERE NOT CASE r.status
                  WHEN 'reserved' THEN r.finalized_at IS NULL AND r.actual_amount IS NULL
                  WHEN 'committed' THEN r.finalized_at IS NOT NULL AND r.actual_amount IS NOT NULL
                  WHEN 'released' THEN r.finalized_at IS NOT NULL AND r.actual_amount IS NULL
                  ELSE false
              END
    UNION ALL
    SELECT 'open_reservation_of_finished_task', r.scope_type, r.scope_key, r.metric,
           r.window_seconds, r.window_start, r.task_id, t.status, r.id, NULL, 0, r.reserved_amount
    FROM gateway_rate_limit_reservations AS r
    JOIN gateway_tasks AS t ON t.id = r.task_id
    WHERE r.status = 'reserved'
      AND t.status IN ('succeeded', 'failed', 'cancelled')
    UNION ALL
    SELECT 'live_lease_of_finished_task', l.scope_type, l.scope_key, 'concurrent', NULL, NULL,
           l.task_id, t.status, l.id, NULL, 0, l.lease_value
    FROM gateway_concurrency_leases AS l
    JOIN gateway_tasks AS t ON t.id = l.task_id
    WHERE l.released_at IS NULL
      AND l.expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
      AND t.status IN ('succeeded', 'failed', 'cancelled')
    UNION ALL
    SELECT 'admission_of_finished_task', a.scope_type, a.scope_key, 'queue_size', NULL, NULL,
           a.task_id, t.status, NULL, NULL, 0, 1
    FROM gateway_task_admissions AS a
    JOIN gateway_tasks AS t ON t.id = a.task_id
    WHERE t.status IN ('succeeded', 'failed', 'cancelled')
    UNION ALL
    SELECT 'running_attempt_of_finished_task', NULL, NULL, NULL, NULL, NULL,
           a.task_id, t.status, a.id, NULL, 0, 1
    FROM gateway_task_attempts AS a
    JOIN gateway_tasks AS t ON t.id = a.task_id
    WHERE a.status = 'running'
      AND t.status IN ('succeeded', 'failed', 'cancelled')
    UNION ALL
    SELECT 'open_reservation_of_finished_attempt', r.scope_type, r.scope_key, r.metric,
           r.window_seconds, r.window_start, r.task_id, t.status, r.id, a.id, 0, r.reserved_amount
    FROM gateway_rate_limit_reservations AS r
    JOIN gateway_task_attempts AS a ON a.id = r.attempt_id
    LEFT JOIN gateway_tasks AS t ON t.id = r.task_id
    WHERE r.status = 'reserved'
      AND r.attempt_id IS NOT NULL
      AND a.status <> 'running'
      AND (t.status IS NULL OR t.status NOT IN ('succeeded', 'failed', 'cancelled'))
    UNION ALL
    SELECT 'live_lease_of_finished_attempt', l.scope_type, l.scope_key, 'concurrent', NULL, NULL,
           l.task_id, t.status, l.id, a.id, 0, l.lease_value
    FROM gateway_concurrency_leases AS l
    JOIN gateway_task_attempts AS a ON a.id = l.attempt_id
    LEFT JOIN gateway_tasks AS t ON t.id = l.task_id
    WHERE l.released_at IS NULL
      AND l.expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
      AND l.attempt_id IS NOT NULL
      AND a.status <> 'running'
      AND (t.status IS NULL OR t.status NOT IN ('succeeded', 'failed', 'cancelled'))
),
listed AS (
    SELECT p.kind, p.scope_type, p.scope_key, p.metric, p.window_seconds, p.window_start,
           p.task_id, p.task_status, p.row_id, p.attempt_id, p.expected, p.actual
    FROM problems AS p
    ORDER BY p.kind, p.scope_type, p.scope_key, p.metric, p.window_seconds, p.window_start,
             p.task_id, p.row_id
    LIMIT @max_problems::integer
),
checked AS (
    -- One row, kept by the LEFT JOIN when nothing is listed.
    SELECT coalesce(sqlc.narg('now')::timestamptz, now())::timestamptz AS checked_at
)
SELECT coalesce(p.kind, '')::text                               AS kind,
       coalesce(p.scope_type, '')::text                         AS scope_type,
       coalesce(p.scope_key, '')::text                          AS scope_key,
       coalesce(p.metric, '')::text                             AS metric,
       coalesce(p.window_seconds, 0)::integer                   AS window_seconds,
       coalesce(p.window_start, timestamptz 'epoch')::timestamptz AS window_start,
       p.task_id,
       p.task_status,
       p.row_id,
       p.attempt_id,
       coalesce(p.expected, 0)::numeric                         AS expected,
       coalesce(p.actual, 0)::numeric                           AS actual,
       -- The same amounts as numeric's text, exactly, without trailing
       -- zeros (as InspectWindows; a sum keeps its terms' scale: 0.5 + 0.5
       -- is 1.0): a ledger's sum may need more digits than a float64 holds
       -- (1e14 + 1e-9 is 100000000000000.000000001), so expected and actual
       -- can differ where their float64s do not.
       pg_catalog.trim_scale(coalesce(p.expected, 0))::text     AS expected_text,
       pg_catalog.trim_scale(coalesce(p.actual, 0))::text       AS actual_text,
       c.checked_at
FROM checked AS c
LEFT JOIN listed AS p ON true
ORDER BY p.kind, p.scope_type, p.scope_key, p.metric, p.window_seconds, p.window_start,
         p.task_id, p.row_id;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Doctor: checks that the books balance.
--
-- One statement, so every check sees one snapshot of a live database: an
-- admission or a settlement in flight is either wholly visible or not at
-- all. Full scans of the counters and the reservation ledger: an operator
-- tool, not a hot path.
