-- Attempts: gateway_task_attempts, one row per claim of a task.
--
-- Attempt rows are written by the lifecycle statements themselves (TaskCreate
-- for a sync task, TaskClaimNext, TaskFinish, recovery); this file only
-- reads them.

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

-- name: AttemptAttachGrant :one
-- Links the reservations and leases of an admission to the attempt that runs
-- it, once that attempt row exists. Returns how many of each it found.
-- Locks: row locks on the given reservations and leases.
-- Index: gateway_rate_limit_reservations_pkey; gateway_concurrency_leases_pkey.
WITH attached_reservations AS (
    UPDATE gateway_rate_limit_reservations
    SET attempt_id = @attempt_id::uuid,
        updated_at = now()
    WHERE id = ANY(@reservation_ids::uuid[])
    RETURNING id
),
attached_leases AS (
    UPDATE gateway_concurrency_leases
    SET attempt_id = @attempt_id::uuid
    WHERE id = ANY(@lease_ids::uuid[])
    RETURNING id
)
SELECT (SELECT count(*) FROM attached_reservations)::integer AS reservations,
       (SELECT count(*) FROM attached_leases)::integer       AS leases;
