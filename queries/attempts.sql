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
