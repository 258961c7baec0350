-- name: PruneCutoff :one
-- @now (NULL: the database's now()) minus the retention.
-- Locks: none.
-- Index: none.
SELECT (coalesce(sqlc.narg('now')::timestamptz, now())
        - make_interval(secs => @older_than_seconds::float8))::timestamptz AS cutoff;

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
  AND r.window_start + pg_catalog.make_interval(secs => r.window_seconds) < @cutoff::timestamptz
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
-- lock order cannot be violated by waiting). A counter that an admission
-- charged and committed after the statement's snapshot is locked in its
-- newer row, rechecked there (kept if it holds a reservation), and skipped
-- anyway: the delete cannot see that row's tuple id under the snapshot, so a
-- later batch deletes it if it still qualifies.
-- Index: gateway_rate_limit_counters_reset_idx (ended windows), then a TID
-- scan: the rows locked are deleted by tuple id, which the lock keeps
-- valid. (A join on the primary key let the planner hash the batch and read
-- the whole table to probe it, for each batch.)
DELETE FROM gateway_rate_limit_counters AS c
WHERE c.ctid = ANY (ARRAY(
    SELECT x.ctid
    FROM gateway_rate_limit_counters AS x
    WHERE x.reset_at < @cutoff::timestamptz
      AND x.reserved_value = 0::numeric
    ORDER BY x.reset_at
    LIMIT @batch_size::integer
    FOR UPDATE SKIP LOCKED
))
  AND c.reserved_value = 0::numeric;

-- name: PruneReservationNextWindowLength :one
-- The shortest window length of any reservation above @after_seconds (0:
-- none), so that Prune can walk the ledger one window length at a time.
-- Locks: none.
-- Index: gateway_rate_limit_reservations_length_window_idx (its first
-- entry above @after_seconds: one index probe, whatever the table holds).
SELECT coalesce(min(r.window_seconds), 0)::integer AS window_seconds
FROM gateway_rate_limit_reservations AS r
WHERE r.window_seconds > @after_seconds::integer;

-- name: PruneReservations :one
-- Reads the next page of reservations of @window_seconds long windows that
-- ended before the cutoff (began before @starts_before, the cutoff less
-- @window_seconds), in (window_start, id) order after the given
-- position, and deletes those that are finished and whose counter row is
-- gone. Returns how many it read and deleted and the position of the
-- page's last row, from which the next batch continues. It reads no row of
-- a window still running, however long the window: the rows it keeps are
-- open ones (the stale ones were released just before) and those whose
-- counter is kept, read once per run.
-- Locks: row locks on the deleted reservations.
-- Index: gateway_rate_limit_reservations_length_window_idx (the length, the
-- keyset condition and the order come from the index, no sort);
-- gateway_rate_limit_counters_pkey (one probe per row of the page);
-- gateway_rate_limit_reservations_pkey (the delete).
WITH page AS (
    SELECT r.id,
           r.window_start,
           -- A scalar subquery, not NOT EXISTS: one primary-key probe per
           -- row. A NOT EXISTS was hashed over every counter kept (those of
           -- the retention, a day of windows and scopes) once per batch.
           (r.status <> 'reserved'
            AND (SELECT 1
                 FROM gateway_rate_limit_counters AS c
                 WHERE c.scope_type = r.scope_type
                   AND c.scope_key = r.scope_key
                   AND c.metric = r.metric
                   AND c.window_seconds = r.window_seconds
                   AND c.window_start = r.window_start) IS NULL) AS doomed
    FROM gateway_rate_limit_reservations AS r
    WHERE r.window_seconds = @window_seconds::integer
      AND r.window_start < @starts_before::timestamptz
      AND (r.window_start, r.id) > (@after_window_start::timestamptz, @after_id::uuid)
    ORDER BY r.window_start, r.id
    LIMIT @batch_size::integer
),
gone AS (
    -- An array, not a join with the page: the doomed rows are deleted by
    -- primary-key probes (a join let the planner read the whole ledger, by
    -- a sequential scan or its primary key, for a batch of thousands).
    DELETE FROM gateway_rate_limit_reservations AS r
    WHERE r.id = ANY(ARRAY(SELECT page.id FROM page WHERE page.doomed))
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
-- Index: gateway_concurrency_leases_released_idx (partial: released), in
-- released_at order; gateway_concurrency_leases_pkey (the delete, one probe
-- per lease of the batch).
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
-- Index: a partial index of every unreleased lease, read whole (live state,
-- so cheap): gateway_concurrency_leases_live_scope_idx (whose expires_at
-- column serves the cutoff) or gateway_concurrency_leases_live_task_idx;
-- the planner takes either, as their sizes go; then
-- gateway_concurrency_leases_pkey (the delete: one probe per lease of the
-- batch). The batch is an array, not IN (subquery): joined so, it was
-- hashed with a second read of every unreleased lease, on generic and
-- custom plans (TestExpiredLeasesReadLiveLeasesOnce).
DELETE FROM gateway_concurrency_leases AS l
WHERE l.id = ANY(ARRAY(
    SELECT x.id
    FROM gateway_concurrency_leases AS x
    WHERE x.released_at IS NULL
      AND x.expires_at < @cutoff::timestamptz
    ORDER BY x.expires_at
    LIMIT @batch_size::integer
    FOR UPDATE SKIP LOCKED
))
  AND l.released_at IS NULL
  AND l.expires_at < @cutoff::timestamptz;

-- name: PruneEvents :one
-- Deletes the events of the next page of tasks finished before the cutoff,
-- walking finished tasks in (finished_at, id) order after the given
-- position: Prune keeps that position between runs
-- (gateway_maintenance_cursors), so each run starts where the last one
-- stopped instead of walking every finished task ever kept. A page is at
-- most @batch_size tasks, each with all its events. Returns how many tasks
-- it read, how many events it deleted, and the position of the page's last
-- task.
-- Locks: row locks on the deleted events; tasks only read.
-- Index: gateway_tasks_finished_id_idx (keyset range scan in its order, no
-- sort); gateway_task_events_task_seq_key (events of each task).
WITH page AS (
    SELECT t.id, t.finished_at
    FROM gateway_tasks AS t
    WHERE t.status IN ('succeeded', 'failed', 'cancelled')
      AND t.finished_at < @cutoff::timestamptz
      AND (t.finished_at, t.id) > (@after_finished_at::timestamptz, @after_id::uuid)
    ORDER BY t.finished_at, t.id
    LIMIT @batch_size::integer
),
gone AS (
    -- An array, not a join: the events of each task of the page are found
    -- by index probes instead of a hash join over every event.
    DELETE FROM gateway_task_events AS e
    WHERE e.task_id = ANY(ARRAY(SELECT page.id FROM page))
    RETURNING e.id
),
last AS (
    SELECT page.finished_at, page.id
    FROM page
    ORDER BY page.finished_at DESC, page.id DESC
    LIMIT 1
)
SELECT (SELECT count(*) FROM page)::integer AS scanned,
       (SELECT count(*) FROM gone)::integer AS deleted,
       coalesce((SELECT last.finished_at FROM last), @after_finished_at::timestamptz)::timestamptz AS last_finished_at,
       coalesce((SELECT last.id FROM last), @after_id::uuid)::uuid                                  AS last_id;

-- name: PruneTasks :execrows
-- Deletes a batch of tasks finished before the task cutoff (the task
-- retention), oldest first, with their attempts, events and queue
-- admissions. Their reservations and leases stay in the ledgers with
-- task_id and attempt_id set to NULL, so the counters still equal their
-- ledger; prune removes them with their windows. A task that still holds
-- an open reservation or an unreleased lease (taken concurrently with its
-- finish) is kept until Recover has released them: with task_id NULL,
-- Recover would no longer find them, and the reservation would hold its
-- window's capacity until the window ended.
-- The foreign keys would do all of that (ON DELETE CASCADE, SET NULL), a
-- statement per row and key: seven per task, the ledger rows updated twice
-- (task_id, then attempt_id once the attempt goes), three quarters of the
-- time. The statement does the ledgers' part and the events itself first,
-- a statement per table for the whole batch, each ledger row updated once,
-- exactly as the keys would (attempt_id only where its attempt goes); the
-- keys' actions, which still fire for every task and attempt, find nothing
-- left of it: a batch of 5,000 tasks with 10,000 reservations, 5,000 leases
-- and 15,000 events took 0.72-1.26 s, 0.41-0.74 s with the attempts
-- deleted here too. Left to the keys: the attempts (a probe a task, 40-75
-- ms of such a batch: the maintenance role may not delete them, and an
-- upgrade must not need a new grant), a ledger row that names a deleted
-- attempt but not its task (task_id NULL), and queue admissions, which
-- FinishTask and Recover delete before (a DELETE of its own read that
-- table whole on a small one).
-- Deleted tasks leave the index, so the next batch starts past them: no
-- position to keep (the few kept are read again).
-- Locks: row locks on the deleted tasks, taken as they are chosen, FOR
-- UPDATE SKIP LOCKED: a task row another transaction holds (a Reserve's
-- foreign-key check FOR KEY SHARE, a late heartbeat) is left for the next
-- run, never waited for. Waiting deadlocked: this statement locks its batch
-- in one order, while a combined Reserve naming several of its tasks takes
-- their FOR KEY SHARE in its arrival order. Then row locks on the rows of
-- those tasks it deletes or updates (ledgers, events, and through the
-- keys attempts and queue admissions).
-- Index: gateway_tasks_finished_id_idx (oldest finished first, no sort);
-- gateway_tasks_pkey (the delete); gateway_task_attempts_task_id_attempt_no_key,
-- gateway_task_events_task_seq_key, gateway_task_admissions_pkey,
-- gateway_rate_limit_reservations_task_idx and
-- gateway_concurrency_leases_task_idx for the rows of the batch's tasks
-- (and for the keys' actions, which find none), and the attempt_idx of
-- both ledgers for the attempts' keys;
-- gateway_rate_limit_reservations_task_idx and
-- gateway_concurrency_leases_task_idx also for what a task still holds (a
-- probe of its few rows).
WITH doomed AS (
    -- An array, not IN (subquery): each table's rows of the batch are
    -- found by index probes instead of a hash join over the whole table.
    SELECT ARRAY(
        SELECT x.id
        FROM gateway_tasks AS x
        WHERE x.status IN ('succeeded', 'failed', 'cancelled')
          AND x.finished_at < @cutoff::timestamptz
          -- Scalar subqueries: one probe by task id per task (a NOT EXISTS
          -- could be hashed over every open row instead). The liveness tests
          -- are written `(...) IS TRUE` so that the planner cannot match them
          -- to the partial indexes of open reservations and live leases: a
          -- VACUUM run while nothing was open records those as empty, and a
          -- plan made then read every live lease, through
          -- gateway_concurrency_leases_live_scope_idx, for every task.
          -- Each test is a coalesce, not `(...) IS NULL`: the planner takes
          -- that to hold for 0.5% of tasks (both: 0.0025%), expects to need
          -- every finished task for a batch, and on a table whose tasks do not
          -- lie in finish order read them all, probed each and sorted them, in
          -- every batch; a coalesce it takes to hold for half, and walks the
          -- index in order up to the batch.
          AND coalesce((SELECT false
                         FROM gateway_rate_limit_reservations AS r
                         WHERE r.task_id = x.id
                           AND (r.status = 'reserved') IS TRUE
                         LIMIT 1), true)
          AND coalesce((SELECT false
                         FROM gateway_concurrency_leases AS l
                         WHERE l.task_id = x.id
                           AND (l.released_at IS NULL) IS TRUE
                         LIMIT 1), true)
        ORDER BY x.finished_at, x.id
        LIMIT @batch_size::integer
        FOR UPDATE OF x SKIP LOCKED
    ) AS ids
),
attempts AS (
    -- Read, not deleted: their key deletes them (ON DELETE CASCADE runs as
    -- the table's owner; docs/privileges.sql grants maintenance no DELETE
    -- on attempts), after the ledgers let go of them here.
    SELECT a.id
    FROM gateway_task_attempts AS a, doomed
    WHERE a.task_id = ANY(doomed.ids)
),
reservations AS (
    -- attempt_id tested against the attempts that go (hashed): an
    -- attempt of another task, were one named, stays.
    UPDATE gateway_rate_limit_reservations AS r
    SET task_id = NULL,
        attempt_id = CASE WHEN r.attempt_id IN (SELECT attempts.id FROM attempts) THEN NULL ELSE r.attempt_id END
    FROM doomed
    WHERE r.task_id = ANY(doomed.ids)
),
leases AS (
    UPDATE gateway_concurrency_leases AS l
    SET task_id = NULL,
        attempt_id = CASE WHEN l.attempt_id IN (SELECT attempts.id FROM attempts) THEN NULL ELSE l.attempt_id END
    FROM doomed
    WHERE l.task_id = ANY(doomed.ids)
),
events AS (
    DELETE FROM gateway_task_events AS e
    USING doomed
    WHERE e.task_id = ANY(doomed.ids)
)
DELETE FROM gateway_tasks AS t
USING doomed
WHERE t.id = ANY(doomed.ids)
  AND t.status IN ('succeeded', 'failed', 'cancelled')
  AND t.finished_at < @cutoff::timestamptz;

-- name: PruneAllotments :execrows
-- Deletes a batch of returned allotments whose window ended before the
-- cutoff (a block expires with its window) and whose counter row is gone
-- (so every remaining counter still equals its ledger). It reads no block
-- of a window still running; the ended ones it keeps (not returned yet, or
-- their counter kept) are few and read again by the next batch.
-- Locks: row locks on the deleted allotments.
-- Index: gateway_rate_limit_allotments_expiry_idx (in its order, no sort);
-- gateway_rate_limit_counters_pkey (one probe per block);
-- gateway_rate_limit_allotments_pkey (the delete).
DELETE FROM gateway_rate_limit_allotments AS a
WHERE a.id = ANY(ARRAY(
    SELECT x.id
    FROM gateway_rate_limit_allotments AS x
    WHERE x.expires_at < @cutoff::timestamptz
      AND x.returned_at IS NOT NULL
      -- A scalar subquery, not NOT EXISTS: one primary-key probe per block.
      -- Prune's counters step has just deleted the counters of the ended
      -- windows, so this runs on statistics that still count them, and a
      -- NOT EXISTS was then planned as an anti-join of every ended block
      -- with every counter, both read whole and sorted, in every batch.
      -- A coalesce, not `(...) IS NULL`: the planner takes that to hold for
      -- 0.5% of blocks, expects to need every ended block for a batch, and
      -- on a table whose blocks do not lie in expiry order (a day's blocks
      -- among a minute's, space of pruned blocks reused) read them all,
      -- probed each and sorted them, in every batch; a coalesce it takes
      -- to hold for half, and walks the index in order up to the batch.
      AND coalesce((SELECT false
                    FROM gateway_rate_limit_counters AS c
                    WHERE c.scope_type = x.scope_type
                      AND c.scope_key = x.scope_key
                      AND c.metric = x.metric
                      AND c.window_seconds = x.window_seconds
                      AND c.window_start = x.window_start), true)
    ORDER BY x.expires_at, x.id
    LIMIT @batch_size::integer
));

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Retention: deletes history older than a cutoff, in bounded batches.
--
-- Prune computes the cutoff once, on the database's clock (PruneCutoff), and
-- passes it to every batch, so all batches of one run agree on it. Nothing
-- here touches live state: a counter window is deleted only after it ended
-- and when no open reservation draws on it; a reservation only once it is
-- finished, its window ended and its counter row is gone (so the doctor's
-- "used equals the sum of committed amounts" holds for every counter that
-- remains); a lease only once released or expired; events only of finished
-- tasks; a task only once finished before its own, longer cutoff (the task
-- retention), with its attempts, events and admissions (ON DELETE CASCADE)
-- while the ledgers keep their rows (ON DELETE SET NULL).
