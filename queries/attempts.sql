-- name: AttemptListByTask :many
-- Every attempt of one task, in attempt order.
-- Locks: none (MVCC read).
-- Index: gateway_task_attempts_task_id_attempt_no_key.
SELECT a.id,
       a.task_id,
       a.attempt_no,
       a.status,
       a.retryable,
       a.error_code,
       a.error_message,
       a.started_at,
       a.finished_at
FROM gateway_task_attempts AS a
WHERE a.task_id = @task_id::uuid
ORDER BY a.attempt_no;

-- name: AttemptAttachLock :exec
-- First statement of an attach, after the counters of the grant's
-- reservations (the lock order): locks the attempt's task row FOR SHARE,
-- then the grant's leases in id order (the lease lock order, see
-- TaskFinish), so that AttemptAttachGrant, which runs next in the same
-- transaction with a snapshot of its own, reads them as whoever held them
-- last left them.
-- The task row: an attach waits for a lifecycle step of the task in flight
-- (FinishTask, recovery), and then finds the attempt no longer running;
-- and such a step waits for an attach in flight (FinishTask locks the task
-- row before TaskFinish takes its snapshot: TaskFinishLock), and then
-- settles what it linked. Before, an attach could link a grant to an
-- attempt that was being finished, after FinishTask had chosen what to
-- settle, leaving it open on a finished task.
-- The leases: two attaches of one grant taken without a task (leases only:
-- no counter to serialize them) both read the leases as of no task, and
-- both linked them to their own task, the last writer winning.
-- Locks: FOR SHARE on the attempt's task row (conflicts with the updates of
-- lifecycle steps, not with the FOR KEY SHARE that admissions take); FOR
-- UPDATE on each given lease, in id order.
-- Index: gateway_task_attempts_pkey; gateway_tasks_pkey;
-- gateway_concurrency_leases_pkey.
-- The task first, then the leases: the order of the final SELECT's scalar
-- subqueries.
WITH task AS (
    SELECT t.id
    FROM gateway_tasks AS t
    WHERE t.id = (SELECT a.task_id FROM gateway_task_attempts AS a WHERE a.id = @attempt_id::uuid)
    FOR SHARE
),
leases AS (
    SELECT l.id
    FROM gateway_concurrency_leases AS l
    WHERE l.id = ANY(@lease_ids::uuid[])
    ORDER BY l.id
    FOR UPDATE
)
SELECT (SELECT count(*) FROM task)   AS tasks,
       (SELECT count(*) FROM leases) AS leases;

-- name: AttemptAttachGrant :one
-- Links the reservations and leases of an admission to the attempt that runs
-- it, once that attempt row exists, and to the attempt's task: a grant taken
-- without a task is adopted by it (so that finishing or recovering the task
-- settles it), a grant of another task is refused. All or nothing: nothing
-- changes unless the attempt is running, every given row exists and none
-- belongs to another task (a grant with a row pruned or never written links
-- none of the others). Returns what it found, for the caller to say why
-- nothing changed.
-- Run after AttemptAttachLock in the same transaction: the attempt's status
-- is then read as a lifecycle step of its task left it, the leases' task as
-- the last attach left it (a grant another attach has just linked to its
-- task counts as of another task here).
-- Locks: FOR KEY SHARE on the attempt row (so that it cannot be deleted
-- under the links); row locks on the given reservations (after their
-- counters, which the caller locks first) and leases (in id order; held
-- since AttemptAttachLock).
-- Index: gateway_task_attempts_pkey; gateway_rate_limit_reservations_pkey;
-- gateway_concurrency_leases_pkey. The task tests are written `(...) IS
-- TRUE` so that the planner cannot prove from them the predicate (task_id
-- IS NOT NULL) of the indexes of every row's task: a VACUUM run while no
-- ledger row had a task records those as empty, and a plan made on that
-- would read every row of a task through them instead of probing the
-- primary key (TestHotPathsReadOnlyTheirRowsAfterAQuietVacuum).
WITH attempt AS (
    SELECT a.id, a.task_id, a.status
    FROM gateway_task_attempts AS a
    WHERE a.id = @attempt_id::uuid
    FOR KEY SHARE
),
other_task AS (
    SELECT (SELECT count(*)
            FROM gateway_rate_limit_reservations AS r, attempt
            WHERE r.id = ANY(@reservation_ids::uuid[])
              AND (r.task_id <> attempt.task_id) IS TRUE)
         + (SELECT count(*)
            FROM gateway_concurrency_leases AS l, attempt
            WHERE l.id = ANY(@lease_ids::uuid[])
              AND (l.task_id <> attempt.task_id) IS TRUE) AS n
),
missing AS (
    -- Given ids that name no row: checked before anything is written, not
    -- counted after, so that a refusal leaves the other rows as they were.
    SELECT (SELECT count(*)
            FROM pg_catalog.unnest(@reservation_ids::uuid[]) AS g(id)
            WHERE NOT EXISTS (SELECT 1 FROM gateway_rate_limit_reservations AS r WHERE r.id = g.id))
         + (SELECT count(*)
            FROM pg_catalog.unnest(@lease_ids::uuid[]) AS g(id)
            WHERE NOT EXISTS (SELECT 1 FROM gateway_concurrency_leases AS l WHERE l.id = g.id)) AS n
),
target AS (
    SELECT attempt.id, attempt.task_id
    FROM attempt, other_task, missing
    WHERE attempt.status = 'running'
      AND other_task.n = 0
      AND missing.n = 0
),
attached_reservations AS (
    UPDATE gateway_rate_limit_reservations AS r
    SET attempt_id = target.id,
        task_id = target.task_id,
        updated_at = now()
    FROM target
    WHERE r.id = ANY(@reservation_ids::uuid[])
    RETURNING r.id
),
attached_leases AS (
    -- The leases are already locked, in id order, by AttemptAttachLock
    -- earlier in the transaction: in the order of the ids given, or of the
    -- plan's scan, this deadlocked with FinishTask, recovery or a heartbeat
    -- of the same task's leases.
    UPDATE gateway_concurrency_leases AS l
    SET attempt_id = target.id,
        task_id = target.task_id
    FROM target
    WHERE l.id = ANY(@lease_ids::uuid[])
    RETURNING l.id
)
SELECT coalesce((SELECT status FROM attempt), '')::text        AS attempt_status,
       (SELECT task_id FROM attempt)::uuid                     AS task_id,
       (SELECT n FROM other_task)::integer                     AS other_task_rows,
       (SELECT n FROM missing)::integer                        AS missing_rows,
       (SELECT count(*) FROM attached_reservations)::integer   AS reservations,
       (SELECT count(*) FROM attached_leases)::integer         AS leases;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Attempts: gateway_task_attempts, one row per claim of a task.
--
-- Attempt rows are written by the lifecycle statements themselves (TaskCreate
-- for a sync task, TaskClaimNext, TaskFinish, recovery); this file only
-- reads them.
