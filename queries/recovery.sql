-- name: RecoveryTaskFindExpired :many
-- A batch of running tasks whose execution lease expired, oldest expiry
-- first, each with the ids of its open reservations (whose counters the
-- batch locks next). Read only: RecoveryTaskReclaim re-checks every
-- condition under the task row's lock.
-- Locks: none (MVCC read).
-- Index: gateway_tasks_running_idx (partial: running; read whole, live
-- state, and the batch whose leases expired first kept by a top-N sort:
-- keyed on id, not on the expiry, so that heartbeats are HOT updates,
-- schema/00022_hot_heartbeats.sql);
-- gateway_rate_limit_reservations_open_task_idx.
SELECT t.id,
       coalesce((SELECT pg_catalog.array_agg(r.id ORDER BY r.id)
                 FROM gateway_rate_limit_reservations AS r
                 WHERE r.task_id = t.id
                   AND r.status = 'reserved'), '{}')::uuid[] AS open_reservation_ids
FROM gateway_tasks AS t
WHERE t.status = 'running'
  AND t.execution_lease_expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())
ORDER BY t.execution_lease_expires_at, t.id
LIMIT @batch_size::integer;

-- name: RecoveryTaskReclaim :many
-- Takes back the given running tasks whose execution lease (still) expired:
-- an async task that has been requeued fewer than @max_requeues times is
-- requeued (requeue_count + 1, due now, task.queued event) and keeps its
-- queue admissions; an async task past the cap is failed for good
-- (requeue_limit_exceeded, task.failed event); a sync task is failed
-- (server_restarted, task.failed event: its caller is gone). For each, the
-- running attempt fails (execution_lease_expired) and unreleased leases are
-- released; a failed task's admissions are deleted. Returns one row per
-- reclaimed task with what was done to it. A task that was finished or
-- heartbeated since RecoveryTaskFindExpired is left alone, and so is one
-- whose row another transaction holds (its worker heartbeating or finishing
-- it in a transaction of its own): waiting for it would hold the counter
-- rows locked before it, and every admission on them, for as long as that
-- transaction lasts. A later pass finds it again if it is still expired.
-- For the same reason a lease another transaction holds (its worker
-- renewing it) is left unreleased here: its attempt is over, so
-- RecoveryLeaseReleaseForFinishedAttempts gives it back once it is free
-- (a lease without an attempt lapses at its expiry).
-- Run after CounterLockForReservations of the tasks' open reservations.
-- Locks: FOR NO KEY UPDATE SKIP LOCKED on each task row, in id order; row
-- locks on their running attempts, their unreleased leases (SKIP LOCKED,
-- in id order, the lease lock order: see TaskFinish) and admissions.
-- Index: gateway_tasks_pkey; gateway_task_attempts_running_idx;
-- gateway_concurrency_leases_task_idx (all of the task's leases, a few),
-- then gateway_concurrency_leases_pkey (the update of each lease locked);
-- gateway_task_admissions_pkey. The tasks to update, and the reclaimed
-- tasks whose attempts and leases to finish, are arrays of ids
-- (ANY(ARRAY(...))), not joins: joined to the reclaimed tasks, the
-- attempts were once read whole (319 index entries, under a plan made on
-- statistics an autovacuum had just taken). The status tests of tasks and
-- leases are written `IS TRUE`, which no partial index of running tasks or
-- live leases matches: else a plan could read every running task, or
-- every live lease, and filter them, while the caller holds counter rows
-- (TestHotPathsReadOnlyTheirRowsAfterAQuietVacuum).
-- Requeue or fail: `t.async_mode AND t.requeue_count < @max_requeues`,
-- asked once per task in the sub-SELECT that sets the columns it decides
-- (d.requeue), a per-row value of the row being updated. Not in a CTE:
-- joined to the update, that makes the update a join, whose generic plan
-- can read every running task and filter them by it (as EXPLAIN shows on
-- a fresh schema), where the array names the ids to read. The sub-SELECT
-- leaves the plan as it was (one probe of gateway_tasks_pkey per id).
WITH clock AS (
    SELECT coalesce(sqlc.narg('now')::timestamptz, now()) AS now,
           @max_requeues::integer                         AS max_requeues
),
reclaimed AS (
    UPDATE gateway_tasks AS t
    -- Requeue or fail, asked once per task (d.requeue) for every column it
    -- decides.
    SET (status, requeue_count, error_code, error_message, remote_task_payload,
         locked_by, locked_at, heartbeat_at, next_run_at, finished_at) = (
            SELECT CASE WHEN d.requeue THEN 'queued' ELSE 'failed' END,
                   CASE WHEN d.requeue THEN t.requeue_count + 1 ELSE t.requeue_count END,
                   CASE WHEN d.requeue THEN NULL
                        WHEN t.async_mode THEN 'requeue_limit_exceeded'
                        ELSE 'server_restarted' END,
                   CASE WHEN d.requeue THEN NULL
                        WHEN t.async_mode THEN 'execution lease expired ' || (t.requeue_count + 1)::text
                                               || ' times; requeued ' || t.requeue_count::text
                                               || ' times, the limit'
                        ELSE 'task interrupted by service restart' END,
                   CASE WHEN d.requeue THEN t.remote_task_payload ELSE '{}'::jsonb END,
                   -- A failed task keeps who ran it (Task.Worker) and when that
                   -- worker was last heard from (heartbeat_at), as a finished
                   -- one does and as the reference's recovery keeps them: its
                   -- attempts record neither. A requeued one is unclaimed.
                   CASE WHEN d.requeue THEN NULL ELSE t.locked_by END,
                   CASE WHEN d.requeue THEN NULL ELSE t.locked_at END,
                   CASE WHEN d.requeue THEN NULL ELSE t.heartbeat_at END,
                   CASE WHEN d.requeue THEN clock.now ELSE t.next_run_at END,
                   CASE WHEN d.requeue THEN NULL ELSE clock.now END
            FROM (SELECT t.async_mode AND t.requeue_count < clock.max_requeues AS requeue) AS d),
        error = NULL,
        execution_token = NULL,
        execution_lease_expires_at = NULL,
        last_event_seq = t.last_event_seq + 1,
        updated_at = clock.now
    FROM clock
    WHERE t.id = ANY(ARRAY(
              SELECT x.id
              FROM gateway_tasks AS x
              WHERE x.id = ANY(@task_ids::uuid[])
                AND (x.status = 'running') IS TRUE
                AND (x.execution_lease_expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())) IS TRUE
              ORDER BY x.id
              FOR NO KEY UPDATE SKIP LOCKED))
      AND (t.status = 'running') IS TRUE
      AND (t.execution_lease_expires_at <= clock.now) IS TRUE
    RETURNING t.id, t.async_mode, t.status, t.error_code, t.error_message, t.requeue_count,
              t.attempt_count, t.last_event_seq
),
attempts AS (
    UPDATE gateway_task_attempts AS a
    SET status = 'failed',
        retryable = true,
        error_code = 'execution_lease_expired',
        error_message = 'attempt execution lease expired',
        finished_at = clock.now
    FROM clock
    WHERE a.task_id = ANY(ARRAY(SELECT r.id FROM reclaimed AS r))
      AND a.status = 'running'
    RETURNING a.task_id
),
leases AS (
    UPDATE gateway_concurrency_leases AS l
    SET released_at = clock.now,
        reason = 'execution_lease_expired'
    FROM clock,
         (SELECT x.id
          FROM gateway_concurrency_leases AS x
          WHERE x.task_id = ANY(ARRAY(SELECT r.id FROM reclaimed AS r))
            AND (x.released_at IS NULL) IS TRUE
          ORDER BY x.id
          FOR UPDATE OF x SKIP LOCKED) AS locked
    WHERE l.id = locked.id
    RETURNING l.task_id
),
admissions AS (
    DELETE FROM gateway_task_admissions AS a
    USING reclaimed
    WHERE a.task_id = reclaimed.id
      AND reclaimed.status = 'failed'
    RETURNING a.task_id
),
events AS (
    INSERT INTO gateway_task_events (task_id, seq, event_type, status, message, payload, created_at)
    SELECT reclaimed.id,
           reclaimed.last_event_seq,
           'task.' || reclaimed.status,
           reclaimed.status,
           reclaimed.error_message,
           jsonb_strip_nulls(pg_catalog.jsonb_build_object(
               'reason', 'execution_lease_expired',
               'error_code', reclaimed.error_code,
               'attempt_no', reclaimed.attempt_count,
               'requeue_count', reclaimed.requeue_count)),
           clock.now
    FROM reclaimed, clock
    RETURNING task_id
)
SELECT reclaimed.id,
       reclaimed.async_mode,
       reclaimed.status,
       coalesce(reclaimed.error_code, '')::text                                          AS error_code,
       (SELECT count(*) FROM attempts WHERE attempts.task_id = reclaimed.id)::integer     AS failed_attempts,
       (SELECT count(*) FROM leases WHERE leases.task_id = reclaimed.id)::integer         AS released_leases,
       (SELECT count(*) FROM admissions WHERE admissions.task_id = reclaimed.id)::integer AS deleted_admissions
FROM reclaimed
ORDER BY reclaimed.id;

-- name: RecoveryReservationFindForFinishedTasks :many
-- A batch of open reservations whose task is finished (a worker finished it
-- without settling, or reserved after finishing). The batch then locks
-- their counters and releases them with AdmissionSettle.
-- Locks: none (MVCC read; AdmissionSettle skips what is no longer open).
-- Index: gateway_rate_limit_reservations_open_task_idx (partial: open; read
-- in its order, task id first, from the first that is not NULL; a custom
-- plan may read it by a bitmap scan and sort); gateway_tasks_pkey (one
-- probe per open row, on custom and generic plans). Ordered by id, the
-- generic plan walked the ledger's primary key in id order instead,
-- reading every settled row; joined to gateway_tasks, a custom plan (the
-- first five runs of the prepared statement on a connection) hashed a
-- sequential scan of every task instead of probing them: it did with
-- 30,800 tasks and 950 open reservations, 125 ms
-- (TestRecoverFindsRowsOfFinishedTasksThroughOpenRows).
SELECT r.id
FROM gateway_rate_limit_reservations AS r
CROSS JOIN LATERAL (
    -- One primary-key probe per open reservation (LIMIT 1 keeps the
    -- planner from hashing the whole task table instead).
    SELECT 1
    FROM gateway_tasks AS t
    WHERE t.id = r.task_id
      AND t.status IN ('succeeded', 'failed', 'cancelled')
    LIMIT 1
) AS finished
WHERE r.status = 'reserved'
  AND r.task_id IS NOT NULL
ORDER BY r.task_id, r.id
LIMIT @batch_size::integer;

-- name: RecoveryLeaseReleaseExpired :execrows
-- Marks a batch of expired, unreleased leases released (reason expired).
-- They no longer counted; this closes them in the books. Leases another
-- transaction holds right now are skipped.
-- Locks: row locks on the released leases (SKIP LOCKED).
-- Index: a partial index of every unreleased lease, read whole (live state,
-- so cheap): gateway_concurrency_leases_live_scope_idx (whose expires_at
-- column serves the test) or gateway_concurrency_leases_live_task_idx; the
-- planner takes either, as their sizes go; then
-- gateway_concurrency_leases_pkey (one probe per lease of the batch). The
-- batch is an array, not IN (subquery): joined so, it was hashed with a
-- second read of every unreleased lease, on generic and custom plans
-- (TestExpiredLeasesReadLiveLeasesOnce).
UPDATE gateway_concurrency_leases AS l
SET released_at = coalesce(sqlc.narg('now')::timestamptz, now()),
    reason = 'expired'
WHERE l.id = ANY(ARRAY(
    SELECT x.id
    FROM gateway_concurrency_leases AS x
    WHERE x.released_at IS NULL
      AND x.expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())
    ORDER BY x.expires_at
    LIMIT @batch_size::integer
    FOR UPDATE SKIP LOCKED
))
  AND l.released_at IS NULL;

-- name: RecoveryLeaseReleaseForFinishedTasks :execrows
-- Releases a batch of unreleased leases whose task is finished (reason
-- task_finished): a finished task holds no slot.
-- Locks: row locks on the released leases (SKIP LOCKED); tasks only read.
-- Index: gateway_concurrency_leases_live_task_idx (partial: unreleased;
-- read in its order, task id first, from the first that is not NULL),
-- or on a custom plan either partial index of unreleased leases, read
-- whole and sorted (live state); gateway_tasks_pkey (one probe per live
-- lease, on custom and generic plans); gateway_concurrency_leases_pkey for
-- the update (a plan, custom or generic, may hash the batch with every
-- unreleased lease, read by a bitmap scan of a partial index of them,
-- instead: both did with 1,000 unreleased leases of 22,000).
-- Ordered by id, the generic plan walked the primary key of every lease
-- instead; joined to gateway_tasks, a custom plan (the first five runs of
-- the prepared statement on a connection) hashed a sequential scan of
-- every task instead of probing them: it did with 30,800 tasks and 340
-- unreleased leases (TestRecoverFindsRowsOfFinishedTasksThroughOpenRows).
UPDATE gateway_concurrency_leases AS l
SET released_at = coalesce(sqlc.narg('now')::timestamptz, now()),
    reason = 'task_finished'
WHERE l.id IN (
    SELECT x.id
    FROM gateway_concurrency_leases AS x
    CROSS JOIN LATERAL (
        -- One primary-key probe per live lease (see above).
        SELECT 1
        FROM gateway_tasks AS t
        WHERE t.id = x.task_id
          AND t.status IN ('succeeded', 'failed', 'cancelled')
        LIMIT 1
    ) AS finished
    WHERE x.released_at IS NULL
      AND x.task_id IS NOT NULL
    ORDER BY x.task_id, x.id
    LIMIT @batch_size::integer
    FOR UPDATE OF x SKIP LOCKED
)
  AND l.released_at IS NULL;

-- name: RecoveryAttemptFailForFinishedTasks :execrows
-- Fails a batch of attempts still marked running although their task is
-- finished (task_finished).
-- Locks: row locks on the updated attempts (SKIP LOCKED); tasks only read.
-- Index: gateway_task_attempts_running_idx (partial: running; read in its
-- order, task id first); gateway_tasks_pkey (one probe per running
-- attempt); gateway_task_attempts_pkey (the update; a plan, custom or
-- generic, may hash the batch with every running attempt, read by a bitmap
-- scan of gateway_task_attempts_running_idx, instead: both did with 1,000
-- running attempts of 19,000). Ordered by id, the
-- generic plan walked the primary key of every attempt instead
-- (TestRecoverFindsRowsOfFinishedTasksThroughOpenRows).
UPDATE gateway_task_attempts AS a
SET status = 'failed',
    retryable = false,
    error_code = 'task_finished',
    error_message = 'task finished while the attempt was still marked running',
    finished_at = coalesce(sqlc.narg('now')::timestamptz, now())
WHERE a.id IN (
    SELECT x.id
    FROM gateway_task_attempts AS x
    CROSS JOIN LATERAL (
        -- One primary-key probe per running attempt (LIMIT 1 keeps the
        -- planner from hashing the whole task table instead).
        SELECT 1
        FROM gateway_tasks AS t
        WHERE t.id = x.task_id
          AND t.status IN ('succeeded', 'failed', 'cancelled')
        LIMIT 1
    ) AS finished
    WHERE x.status = 'running'
    ORDER BY x.task_id, x.id
    LIMIT @batch_size::integer
    FOR UPDATE OF x SKIP LOCKED
)
  AND a.status = 'running';

-- name: RecoveryReservationFindForFinishedAttempts :many
-- A batch of open reservations attached to an attempt that is no longer
-- running: a dead worker's admission that committed after recovery had
-- reclaimed its task (the admission saw the attempt running; recovery did
-- not see the admission), or a grant attached to an attempt already over.
-- The task lives on (queued again, or running another attempt), so nothing
-- else releases them. (Those of finished tasks are usually gone already:
-- RecoveryReservationFindForFinishedTasks runs first.) The batch then locks
-- their counters and releases them with AdmissionSettle.
-- Starts from the open reservations that name an attempt (live state, few)
-- and probes each attempt by primary key; an attempt never runs again once
-- over, so the verdict cannot go stale. Any batch would do, but ordered by
-- attempt_id, the order of that index: without it a generic plan (its
-- LIMIT unknown) read the whole table sequentially once open rows that name
-- an attempt were a few percent of it (30 ms a batch with 2,000 of 46,000
-- reservations), expecting to meet its batch early.
-- Locks: none (MVCC read; AdmissionSettle skips what is no longer open).
-- Index: gateway_rate_limit_reservations_open_attempt_idx (partial: open
-- and attached to an attempt; exactly the rows this starts from);
-- gateway_task_attempts_pkey.
SELECT r.id
FROM gateway_rate_limit_reservations AS r
CROSS JOIN LATERAL (
    -- One primary-key probe per reservation (LIMIT 1 keeps the planner
    -- from hashing the whole attempts table instead).
    SELECT 1
    FROM gateway_task_attempts AS a
    WHERE a.id = r.attempt_id
      AND a.status <> 'running'
    LIMIT 1
) AS finished
WHERE r.status = 'reserved'
  AND r.attempt_id IS NOT NULL
ORDER BY r.attempt_id
LIMIT @batch_size::integer;

-- name: RecoveryLeaseReleaseForFinishedAttempts :execrows
-- Releases a batch of unreleased leases attached to an attempt that is no
-- longer running (reason attempt_finished), for the reasons given at
-- RecoveryReservationFindForFinishedAttempts: a dead worker's slot that
-- would otherwise count until it expires, or until its task finishes.
-- Starts from the unreleased leases that name an attempt (live state, few)
-- and probes each attempt by primary key, in that index's order (see
-- above).
-- Locks: row locks on the released leases (SKIP LOCKED); attempts only read.
-- Index: gateway_concurrency_leases_live_attempt_idx (partial: unreleased
-- and attached to an attempt; exactly the rows this starts from), or on a
-- custom plan gateway_concurrency_leases_live_task_idx, read whole and
-- sorted (live state: it did with 600 unreleased leases of 300,600);
-- gateway_task_attempts_pkey; gateway_concurrency_leases_pkey for the
-- update (a plan, custom or generic, may hash the batch with every
-- unreleased lease, read by a bitmap scan of
-- gateway_concurrency_leases_live_task_idx, instead: both did with 1,000
-- unreleased leases of 22,000).
UPDATE gateway_concurrency_leases AS l
SET released_at = coalesce(sqlc.narg('now')::timestamptz, now()),
    reason = 'attempt_finished'
WHERE l.id IN (
    SELECT x.id
    FROM gateway_concurrency_leases AS x
    CROSS JOIN LATERAL (
        -- One primary-key probe per lease (see above).
        SELECT 1
        FROM gateway_task_attempts AS a
        WHERE a.id = x.attempt_id
          AND a.status <> 'running'
        LIMIT 1
    ) AS finished
    WHERE x.released_at IS NULL
      AND x.attempt_id IS NOT NULL
    ORDER BY x.attempt_id
    LIMIT @batch_size::integer
    FOR UPDATE OF x SKIP LOCKED
)
  AND l.released_at IS NULL;

-- name: RecoveryAdmissionDeleteForFinishedTasks :one
-- Reads the next page of queue admissions in primary-key order after the
-- given position, and deletes those whose task is finished, so their queue
-- places count again. (TaskFinish and RecoveryTaskReclaim delete a task's
-- admissions as they finish it: this finds what a foreign writer left.)
-- Returns how many it read and deleted and the position of the page's last
-- row, from which the next batch continues: one pass reads each admission
-- once, in index order, never sorting. Admissions are live state (one row
-- per unfinished task and queue scope, bounded by the queue limits).
-- Locks: row locks on the deleted admissions; tasks only read.
-- Index: gateway_task_admissions_pkey (keyset range scan in its order, and
-- the delete: one probe per doomed task, its leading column; while the
-- admissions are few, the planner reads them by a sequential scan instead,
-- which runs only for a page holding a doomed row: it did with 1,200);
-- gateway_tasks_pkey (one probe per admission of the page).
WITH page AS (
    SELECT x.task_id,
           x.scope_type,
           x.scope_key,
           -- A scalar subquery: one primary-key probe per admission (an
           -- EXISTS could be hashed over the whole task table instead).
           coalesce((SELECT t.status IN ('succeeded', 'failed', 'cancelled')
                     FROM gateway_tasks AS t
                     WHERE t.id = x.task_id), false) AS doomed
    FROM gateway_task_admissions AS x
    WHERE (x.task_id, x.scope_type, x.scope_key)
          > (@after_task_id::uuid, @after_scope_type::text, @after_scope_key::text)
    ORDER BY x.task_id, x.scope_type, x.scope_key
    LIMIT @batch_size::integer
),
gone AS (
    -- By task, an array, not a join with the page: a join was hashed over
    -- every admission, read by a sequential scan, in each page holding a
    -- doomed row. A task's status decides for all its admissions, so those
    -- of a doomed task past the page go too (the next page starts after
    -- them). The EXISTS is tested once, before the delete reads anything:
    -- a page with no doomed row (the usual one) reads no admission here,
    -- whichever way a small table would be read.
    DELETE FROM gateway_task_admissions AS a
    WHERE a.task_id = ANY(ARRAY(SELECT page.task_id FROM page WHERE page.doomed))
      AND EXISTS (SELECT 1 FROM page WHERE page.doomed)
    RETURNING a.task_id
),
last AS (
    SELECT page.task_id, page.scope_type, page.scope_key
    FROM page
    ORDER BY page.task_id DESC, page.scope_type DESC, page.scope_key DESC
    LIMIT 1
)
SELECT (SELECT count(*) FROM page)::integer AS scanned,
       (SELECT count(*) FROM gone)::integer AS deleted,
       coalesce((SELECT last.task_id FROM last), @after_task_id::uuid)::uuid          AS last_task_id,
       coalesce((SELECT last.scope_type FROM last), @after_scope_type::text)::text    AS last_scope_type,
       coalesce((SELECT last.scope_key FROM last), @after_scope_key::text)::text      AS last_scope_key;

-- name: RecoveryAllotmentFindLost :many
-- A batch of open blocks whose window ended, and whose holder stopped
-- reporting, more than @grace_seconds ago: a live holder returns a block at
-- its window's end (or keeps reporting while requests admitted from it are
-- still in flight), so this one is gone. Recovery returns them
-- (RecoveryAllotmentReturnLost, given the same grace), charging the holder's last report
-- (consumed) as the return reads it under the block's lock, not here: a
-- report may land between the two. Read only.
-- Locks: none (MVCC read; RecoveryAllotmentReturnLost skips what is
-- returned, or reported, meanwhile).
-- Index: gateway_rate_limit_allotments_open_idx (partial: open, by window end).
SELECT a.id
FROM gateway_rate_limit_allotments AS a
WHERE a.returned_at IS NULL
  AND a.expires_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @grace_seconds::float8)
  AND a.synced_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @grace_seconds::float8)
ORDER BY a.expires_at
LIMIT @batch_size::integer;

-- name: RecoveryAllotmentReturnLost :many
-- Returns the lost blocks RecoveryAllotmentFindLost found (@grace_seconds:
-- the same grace), each charging its holder's last report (consumed) as
-- read under the block's row lock, and leaves open, returned false, a block
-- whose holder reported since the cutoff (a report that landed after the
-- find: the holder is alive and returns the block itself). Reason @reason.
-- Idempotent: returned is false for a block already returned.
-- Locks: the counters FOR UPDATE in primary-key order, then the block rows
-- (pgadmit_allot_return, schema/00019_return_lost_allotments_under_lock.sql).
-- Index: gateway_rate_limit_allotments_pkey; gateway_rate_limit_counters_pkey.
SELECT r.ord::integer      AS ord,
       r.returned::boolean AS returned
FROM pgadmit_allot_return(
         @ids::uuid[], NULL::numeric[],
         pg_catalog.array_fill(@reason::text, ARRAY[pg_catalog.cardinality(@ids::uuid[])]),
         sqlc.narg('now')::timestamptz,
         coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @grace_seconds::float8)
     ) AS r;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Recovery: gives back the capacity that dead processes still hold.
--
-- Recover runs these in bounded batches, each batch its own short
-- transaction that leaves the books correct on its own, while it holds the
-- recover lease (maintenance.sql) so that one process at a time does the
-- work. Statements that settle reservations follow the lock order of
-- counters.sql: the batch locks the counter rows first
-- (CounterLockForReservations), then task rows, then attempts, leases,
-- admissions and events.
--
-- Every statement takes an optional @now (NULL: the database's now()): what
-- has expired, and the time recorded on what recovery ends, are judged on
-- it, so tests drive time instead of sleeping.
