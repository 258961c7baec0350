-- Retention: deletes history older than a cutoff, in bounded batches.
--
-- Prune computes the cutoff once, on the database's clock (PruneCutoff), and
-- passes it to every batch, so all batches of one run agree on it. Nothing
-- here touches live state: a counter window is deleted only after it ended
-- and when no open reservation draws on it; a reservation only once it is
-- finished, its window ended and its counter row is gone (so the doctor's
-- "used equals the sum of committed amounts" holds for every counter that
-- remains); a lease only once released or expired; events only of finished
-- tasks. Tasks and attempts are not deleted.

-- name: PruneCutoff :one
-- now() minus the retention, on the database's clock.
-- Locks: none.
-- Index: none.
SELECT (now() - make_interval(secs => @older_than_seconds::float8))::timestamptz AS cutoff;

-- name: PruneReservationFindStale :many
-- A batch of reservations still open although their window ended before the
-- cutoff: their caller never settled them (a reservation without a task, or
-- a reply lost after the server committed). Their window no longer admits
-- anything, so Prune releases them (window_ended) through AdmissionSettle,
-- which keeps the counter equal to its ledger and lets the window be pruned.
-- Locks: none (MVCC read; AdmissionSettle skips what is no longer open).
-- Index: gateway_rate_limit_reservations_open_task_idx (partial: every open
-- reservation; live state, so reading it whole is cheap).
SELECT r.id
FROM gateway_rate_limit_reservations AS r
WHERE r.status = 'reserved'
  AND r.window_start < @cutoff::timestamptz
  AND r.window_start + make_interval(secs => r.window_seconds) < @cutoff::timestamptz
ORDER BY r.window_start
LIMIT @batch_size::integer;

-- name: PruneCounters :execrows
-- Deletes a batch of counter windows that ended before the cutoff and that
-- no open reservation draws on: reserved_value is the sum of the open
-- reservations' amounts (each positive), so a window with an open
-- reservation has reserved_value > 0 and is kept until that reservation is
-- settled or released. Rows locked by another transaction are skipped, so
-- prune never waits on admission.
-- Locks: row locks on the deleted counters (SKIP LOCKED, so the counters'
-- lock order cannot be violated by waiting).
-- Index: gateway_rate_limit_counters_reset_idx (ended windows).
DELETE FROM gateway_rate_limit_counters AS c
USING (
    SELECT x.scope_type, x.scope_key, x.metric, x.window_seconds, x.window_start
    FROM gateway_rate_limit_counters AS x
    WHERE x.reset_at < @cutoff::timestamptz
      AND x.reserved_value = 0
    ORDER BY x.reset_at
    LIMIT @batch_size::integer
    FOR UPDATE SKIP LOCKED
) AS doomed
WHERE c.scope_type = doomed.scope_type
  AND c.scope_key = doomed.scope_key
  AND c.metric = doomed.metric
  AND c.window_seconds = doomed.window_seconds
  AND c.window_start = doomed.window_start
  AND c.reserved_value = 0;

-- name: PruneReservations :one
-- Reads the next page of reservations of windows that began before the
-- cutoff, in (window_start, id) order after the given position, and deletes
-- those that are finished, whose window ended before the cutoff and whose
-- counter row is gone. Returns how many it read and deleted and the
-- position of the page's last row, from which the next batch continues:
-- rows kept (open, or their counter still lives) are read once per run, not
-- once per batch.
-- Locks: row locks on the deleted reservations.
-- Index: gateway_rate_limit_reservations_window_idx (the keyset condition
-- and the order come from the index, no sort); gateway_rate_limit_counters_pkey
-- (NOT EXISTS).
WITH page AS (
    SELECT r.id,
           r.window_start,
           (r.status <> 'reserved'
            AND r.window_start + make_interval(secs => r.window_seconds) < @cutoff::timestamptz
            AND NOT EXISTS (
                SELECT 1
                FROM gateway_rate_limit_counters AS c
                WHERE c.scope_type = r.scope_type
                  AND c.scope_key = r.scope_key
                  AND c.metric = r.metric
                  AND c.window_seconds = r.window_seconds
                  AND c.window_start = r.window_start
            )) AS doomed
    FROM gateway_rate_limit_reservations AS r
    WHERE r.window_start < @cutoff::timestamptz
      AND (r.window_start, r.id) > (@after_window_start::timestamptz, @after_id::uuid)
    ORDER BY r.window_start, r.id
    LIMIT @batch_size::integer
),
gone AS (
    DELETE FROM gateway_rate_limit_reservations AS r
    USING page
    WHERE r.id = page.id
      AND page.doomed
    RETURNING r.id
),
last AS (
    SELECT page.window_start, page.id
    FROM page
    ORDER BY page.window_start DESC, page.id DESC
    LIMIT 1
)
SELECT (SELECT count(*) FROM page)::integer AS scanned,
       (SELECT count(*) FROM gone)::integer AS deleted,
       coalesce((SELECT last.window_start FROM last), @after_window_start::timestamptz)::timestamptz AS last_window_start,
       coalesce((SELECT last.id FROM last), @after_id::uuid)::uuid                                    AS last_id;

-- name: PruneLeasesReleased :execrows
-- Deletes a batch of leases released before the cutoff.
-- Locks: row locks on the deleted leases.
-- Index: gateway_concurrency_leases_released_idx (partial: released).
DELETE FROM gateway_concurrency_leases AS l
WHERE l.id = ANY(ARRAY(
    -- An array, not IN (subquery): the batch is deleted by primary-key
    -- probes instead of a hash join over the whole table.
    SELECT x.id
    FROM gateway_concurrency_leases AS x
    WHERE x.released_at IS NOT NULL
      AND x.released_at < @cutoff::timestamptz
    ORDER BY x.released_at
    LIMIT @batch_size::integer
));

-- name: PruneLeasesExpired :execrows
-- Deletes a batch of leases never released that expired before the cutoff
-- (a renewal needs an unexpired lease, so they can never count again).
-- Locks: row locks on the deleted leases (SKIP LOCKED).
-- Index: gateway_concurrency_leases_live_task_idx (partial: every unreleased
-- lease; live state, so reading it whole is cheap).
DELETE FROM gateway_concurrency_leases AS l
WHERE l.id IN (
    SELECT x.id
    FROM gateway_concurrency_leases AS x
    WHERE x.released_at IS NULL
      AND x.expires_at < @cutoff::timestamptz
    ORDER BY x.expires_at
    LIMIT @batch_size::integer
    FOR UPDATE SKIP LOCKED
)
  AND l.released_at IS NULL
  AND l.expires_at < @cutoff::timestamptz;

-- name: PruneEvents :one
-- Deletes a batch of events of tasks finished before the cutoff, walking the
-- finished tasks in finished_at order from the given position (tasks whose
-- events are already gone are passed over once per run, not once per
-- batch). Returns how many events it deleted and the finished_at from which
-- the next batch continues (the last deleted event's task may have more).
-- Locks: row locks on the deleted events; tasks only read.
-- Index: gateway_tasks_finished_idx (partial: finished, by finished_at);
-- gateway_task_events_task_seq_key (events of each task).
WITH page AS (
    SELECT e.id, t.finished_at
    FROM gateway_tasks AS t
    CROSS JOIN LATERAL (
        -- The events of one task, by index; OFFSET 0 keeps this a per-task
        -- probe instead of a hash join over every event.
        SELECT ev.id
        FROM gateway_task_events AS ev
        WHERE ev.task_id = t.id
        OFFSET 0
    ) AS e
    WHERE t.status IN ('succeeded', 'failed', 'cancelled')
      AND t.finished_at < @cutoff::timestamptz
      AND t.finished_at >= @after_finished_at::timestamptz
    ORDER BY t.finished_at
    LIMIT @batch_size::integer
),
gone AS (
    DELETE FROM gateway_task_events AS e
    WHERE e.id = ANY(ARRAY(SELECT page.id FROM page))
    RETURNING e.id
)
SELECT (SELECT count(*) FROM gone)::integer AS deleted,
       coalesce((SELECT max(page.finished_at) FROM page), @after_finished_at::timestamptz)::timestamptz AS last_finished_at;

-- name: PruneAllotments :execrows
-- Deletes a batch of returned allotments whose window ended before the
-- cutoff and whose counter row is gone (so every remaining counter still
-- equals its ledger). Blocks are few (one per process, counter and window
-- at most a few), so kept ones are simply read again by the next batch.
-- Locks: row locks on the deleted allotments.
-- Index: gateway_rate_limit_allotments_window_idx; gateway_rate_limit_counters_pkey
-- (NOT EXISTS).
DELETE FROM gateway_rate_limit_allotments AS a
WHERE a.id = ANY(ARRAY(
    SELECT x.id
    FROM gateway_rate_limit_allotments AS x
    WHERE x.window_start < @cutoff::timestamptz
      AND x.expires_at < @cutoff::timestamptz
      AND x.returned_at IS NOT NULL
      AND NOT EXISTS (
          SELECT 1
          FROM gateway_rate_limit_counters AS c
          WHERE c.scope_type = x.scope_type
            AND c.scope_key = x.scope_key
            AND c.metric = x.metric
            AND c.window_seconds = x.window_seconds
            AND c.window_start = x.window_start
      )
    ORDER BY x.window_start, x.id
    LIMIT @batch_size::integer
));
