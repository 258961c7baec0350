-- name: EventAppend :one
-- Appends one event to a running task with the next sequence number, fenced
-- by the execution token as TaskHeartbeat is: a worker whose claim was taken
-- away (recovery reclaimed the task, another worker claimed it again, or it
-- finished) appends nothing. Returns the task's status, and the new
-- event's seq, payload (as jsonb stores it: what EventListByTask reads
-- back) and time (NULL when nothing was appended: the task is not
-- running, or runs under another claim). No row for an unknown task. As TaskHeartbeat: the row is
-- updated whenever the snapshot saw the task running under the token, and
-- the event appended only if the newest version, locked, still is; the
-- status reported is the one found under the lock. The event's time is
-- @now (NULL: the database's now()), as the events the other task
-- statements write.
-- Locks: FOR NO KEY UPDATE on the task row until the transaction ends
-- (serializes appends to one task; other tasks are not affected), once.
-- Index: gateway_tasks_pkey (the status test is written `IS TRUE` so that
-- the planner cannot match it to gateway_tasks_running_idx, the
-- partial index of running tasks, and read every running task through it);
-- gateway_task_events_task_seq_key (insert).
WITH cur AS (
    SELECT t.id, t.status, t.execution_token
    FROM gateway_tasks AS t
    WHERE t.id = @task_id::uuid
),
allocated AS (
    UPDATE gateway_tasks AS t
    SET last_event_seq = CASE WHEN (t.status = 'running' AND t.execution_token = @token::uuid) IS TRUE
                              THEN t.last_event_seq + 1 ELSE t.last_event_seq END
    FROM cur
    WHERE t.id = cur.id
      AND (cur.status = 'running') IS TRUE
      AND cur.execution_token = @token::uuid
    RETURNING t.id, t.status, t.last_event_seq,
              ((t.status = 'running' AND t.execution_token = @token::uuid) IS TRUE) AS fenced
),
appended AS (
    INSERT INTO gateway_task_events (
        task_id, seq, event_type, status, phase, progress, message, payload, simulated, platform_id, created_at
    )
    SELECT allocated.id,
           allocated.last_event_seq,
           @event_type::text,
           sqlc.narg('status')::text,
           sqlc.narg('phase')::text,
           @progress::numeric,
           sqlc.narg('message')::text,
           @payload::jsonb,
           @simulated::boolean,
           sqlc.narg('platform_id')::text,
           coalesce(sqlc.narg('now')::timestamptz, now())
    FROM allocated
    WHERE allocated.fenced
    RETURNING task_id, seq, payload, created_at
)
SELECT (CASE WHEN allocated.id IS NULL THEN cur.status ELSE allocated.status END)::text AS status,
       appended.seq,
       appended.payload,
       appended.created_at
FROM cur
LEFT JOIN allocated ON allocated.id = cur.id
LEFT JOIN appended ON appended.task_id = cur.id;

-- name: EventListByTask :many
-- The events of one task after a given sequence number, in order, at most
-- @max_rows of them.
-- Locks: none (MVCC read).
-- Index: gateway_task_events_task_seq_key (range scan on task_id, seq).
SELECT e.task_id,
       e.seq,
       e.event_type,
       e.status,
       e.phase,
       e.progress,
       e.message,
       e.payload,
       e.simulated,
       e.platform_id,
       e.created_at
FROM gateway_task_events AS e
WHERE e.task_id = @task_id::uuid
  AND e.seq > @after_seq::integer
ORDER BY e.seq
LIMIT @max_rows::integer;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Events: gateway_task_events, the append-only log of a task.
--
-- Sequence numbers come from gateway_tasks.last_event_seq, incremented by an
-- UPDATE whose row lock serializes the appends of one task: each append gets
-- the next number, with no gap and no repeat, whatever the concurrency (the
-- reference used MAX(seq) + 1, which two appenders can both read). The
-- unique (task_id, seq) constraint backs this up.
