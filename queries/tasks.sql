-- name: TaskCreate :one
-- Creates a task together with its queue admissions, all or nothing: the
-- task is inserted only when every queue scope holds fewer admissions than
-- its limit. A sync task (async_mode false) is created running, with its
-- first attempt, execution token and lease; an async task is created queued.
-- Either way the task's first event (seq 1) records it. Returns one row: the
-- verdict, the admitted count of each queue scope before this task (input
-- order), and the new task's columns (NULL when refused).
-- Run after TaskAdmissionLockScopes in the same READ COMMITTED transaction
-- (exact counts; refused, read_committed false, in any other level).
-- Locks: inserts only (FK share lock on the new task row).
-- Index: gateway_task_admissions_scope_idx (count per scope).
WITH queue AS (
    SELECT q.ord,
           q.scope_type,
           q.scope_key,
           q.limit_value,
           (SELECT count(*)
            FROM gateway_task_admissions AS a
            WHERE a.scope_type = q.scope_type
              AND a.scope_key = q.scope_key) AS admitted
    -- unnest in FROM (ROWS FROM, WITH ORDINALITY), not generate_subscripts beside
    -- unnest in a select list: the planner has no row estimate for
    -- generate_subscripts and took a thousand scopes, each costing a count
    -- of its admissions, so a queue of a few hundred tasks put the
    -- statement above jit_above_cost and it was compiled to machine code on
    -- every task created (90-170 ms, against 1-9 ms to run it).
    FROM ROWS FROM (pg_catalog.unnest(@scope_types::text[]), pg_catalog.unnest(@scope_keys::text[]),
                    pg_catalog.unnest(@limit_values::numeric[]))
         WITH ORDINALITY AS q (scope_type, scope_key, limit_value, ord)
),
verdict AS (
    -- Queue counts are exact only in READ COMMITTED (each statement sees
    -- what the previous holder of the scope lock committed): refuse in any
    -- other isolation level rather than over-admit.
    SELECT current_setting('transaction_isolation') = 'read committed' AS read_committed,
           current_setting('transaction_isolation') = 'read committed'
           AND NOT EXISTS (SELECT 1 FROM queue WHERE queue.admitted::numeric >= queue.limit_value) AS admitted,
           coalesce(sqlc.narg('now')::timestamptz, now()) AS now,
           -- The lease's clock: read by this statement, after the queue
           -- scopes' locks (see the head of this file).
           coalesce(sqlc.narg('now')::timestamptz, greatest(now(), clock_timestamp())) AS lease_now
),
created AS (
    INSERT INTO gateway_tasks (
        status, async_mode, kind, payload, locked_by, locked_at, heartbeat_at,
        execution_token, execution_lease_expires_at, attempt_count, last_event_seq,
        next_run_at, created_at, updated_at
    )
    SELECT CASE WHEN @async_mode::boolean THEN 'queued' ELSE 'running' END,
           @async_mode::boolean,
           @kind::text,
           @payload::jsonb,
           CASE WHEN @async_mode::boolean THEN NULL ELSE @worker::text END,
           CASE WHEN @async_mode::boolean THEN NULL ELSE verdict.now END,
           CASE WHEN @async_mode::boolean THEN NULL ELSE verdict.now END,
           CASE WHEN @async_mode::boolean THEN NULL ELSE gen_random_uuid() END,
           CASE WHEN @async_mode::boolean THEN NULL
                ELSE verdict.lease_now + pg_catalog.make_interval(secs => @lease_seconds::integer) END,
           CASE WHEN @async_mode::boolean THEN 0 ELSE 1 END,
           1,
           verdict.now,
           verdict.now,
           verdict.now
    FROM verdict
    WHERE verdict.admitted
    RETURNING id, status, payload, execution_token, execution_lease_expires_at, attempt_count,
              next_run_at, created_at
),
attempt AS (
    INSERT INTO gateway_task_attempts (task_id, attempt_no, started_at)
    SELECT created.id, created.attempt_count, created.created_at
    FROM created
    WHERE created.attempt_count > 0
    RETURNING id, task_id
),
admission AS (
    INSERT INTO gateway_task_admissions (task_id, scope_type, scope_key, limit_value, created_at)
    SELECT created.id, queue.scope_type, queue.scope_key, queue.limit_value, created.created_at
    FROM created
    CROSS JOIN queue
    RETURNING task_id
),
event AS (
    INSERT INTO gateway_task_events (task_id, seq, event_type, status, payload, created_at)
    SELECT created.id,
           1,
           'task.' || created.status,
           created.status,
           pg_catalog.jsonb_build_object('queue_scopes', (SELECT count(*) FROM queue)),
           created.created_at
    FROM created
    RETURNING task_id
)
SELECT verdict.admitted::boolean                                                  AS admitted,
       verdict.read_committed::boolean                                            AS read_committed,
       coalesce((SELECT pg_catalog.array_agg(queue.admitted ORDER BY queue.ord) FROM queue),
                '{}')::bigint[]                                                   AS queue_admitted,
       created.id                                                                 AS task_id,
       created.status                                                             AS status,
       created.payload                                                            AS payload,
       created.execution_token                                                    AS execution_token,
       created.execution_lease_expires_at                                         AS lease_expires_at,
       created.next_run_at                                                        AS next_run_at,
       created.created_at                                                         AS created_at,
       attempt.id                                                                 AS attempt_id
FROM verdict
LEFT JOIN created ON true
LEFT JOIN attempt ON attempt.task_id = created.id;

-- name: TaskClaimNext :one
-- Claims the next due queued async task for a worker: oldest next_run_at
-- first, skipping tasks another worker is claiming right now. Sets it
-- running with a new execution token and lease, counts the attempt, inserts
-- the attempt row and a task.running event. No row when nothing is due.
-- Locks: FOR NO KEY UPDATE SKIP LOCKED on the claimed task row only.
-- Index: gateway_tasks_runnable_idx (partial: queued async, by next_run_at);
-- gateway_tasks_pkey (the update of the claimed row).
WITH clock AS (
    SELECT coalesce(sqlc.narg('now')::timestamptz, now()) AS now,
           -- The lease's clock (see the head of this file).
           coalesce(sqlc.narg('now')::timestamptz, greatest(now(), clock_timestamp())) AS lease_now
),
next AS (
    SELECT t.id
    FROM gateway_tasks AS t
    WHERE t.status = 'queued'
      AND t.async_mode
      AND t.next_run_at <= (SELECT clock.now FROM clock)
    ORDER BY t.next_run_at, t.created_at
    LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE gateway_tasks AS t
    SET status = 'running',
        locked_by = @worker::text,
        locked_at = clock.now,
        heartbeat_at = clock.now,
        execution_token = gen_random_uuid(),
        execution_lease_expires_at = clock.lease_now + pg_catalog.make_interval(secs => @lease_seconds::integer),
        attempt_count = t.attempt_count + 1,
        last_event_seq = t.last_event_seq + 1,
        updated_at = clock.now
    FROM next, clock
    WHERE t.id = next.id
    RETURNING t.id, t.status, t.async_mode, t.kind, t.payload, t.error, t.error_code,
              t.error_message, t.locked_by, t.execution_token, t.execution_lease_expires_at,
              t.attempt_count, t.requeue_count, t.last_event_seq, t.next_run_at,
              t.created_at, t.updated_at, t.finished_at
),
attempt AS (
    INSERT INTO gateway_task_attempts (task_id, attempt_no, started_at)
    SELECT claimed.id, claimed.attempt_count, claimed.updated_at
    FROM claimed
    RETURNING id, task_id
),
event AS (
    INSERT INTO gateway_task_events (task_id, seq, event_type, status, payload, created_at)
    SELECT claimed.id,
           claimed.last_event_seq,
           'task.running',
           'running',
           pg_catalog.jsonb_build_object('attempt_no', claimed.attempt_count, 'worker', claimed.locked_by),
           claimed.updated_at
    FROM claimed
    RETURNING task_id
)
SELECT claimed.id,
       claimed.status,
       claimed.async_mode,
       claimed.kind,
       claimed.payload,
       claimed.error,
       claimed.error_code,
       claimed.error_message,
       claimed.locked_by,
       claimed.execution_token,
       claimed.execution_lease_expires_at,
       claimed.attempt_count,
       claimed.requeue_count,
       claimed.last_event_seq,
       claimed.next_run_at,
       claimed.created_at,
       claimed.updated_at,
       claimed.finished_at,
       attempt.id AS attempt_id
FROM claimed
JOIN attempt ON attempt.task_id = claimed.id;

-- name: TaskCancelAbandoned :execrows
-- Cancels a task whose creator left before TaskCreate's answer came back
-- (its context ended after the statement was sent): nobody knows the
-- task's id, so nobody would run, finish or claim it knowingly. Fenced: a
-- sync task only while it still runs the claim it was created with
-- (@token), an async task only while no worker has claimed it (queued, no
-- attempt yet); otherwise nothing changes (0 rows). Sets it cancelled
-- (error_code abandoned), cancels its running attempt, deletes its queue
-- admissions (their places count again) and appends a task.cancelled
-- event. It holds no reservation or lease: taking one needs its id.
-- Locks: FOR NO KEY UPDATE on the task row; row locks on its running
-- attempt and its admission rows.
-- Index: gateway_tasks_pkey; gateway_task_attempts_running_idx;
-- gateway_task_admissions_pkey.
WITH clock AS (
    SELECT coalesce(sqlc.narg('now')::timestamptz, now()) AS now
),
cancelled AS (
    UPDATE gateway_tasks AS t
    SET status = 'cancelled',
        error_code = 'abandoned',
        error_message = 'the caller of CreateTask left before its answer came back',
        execution_token = NULL,
        execution_lease_expires_at = NULL,
        finished_at = clock.now,
        last_event_seq = t.last_event_seq + 1,
        updated_at = clock.now
    FROM clock
    WHERE t.id = @task_id::uuid
      AND ((t.status = 'running' AND t.execution_token = sqlc.narg('token')::uuid)
           OR (t.status = 'queued' AND t.attempt_count = 0))
    RETURNING t.id, t.error_code, t.error_message, t.last_event_seq, t.finished_at
),
attempt AS (
    UPDATE gateway_task_attempts AS a
    SET status = 'cancelled',
        error_code = cancelled.error_code,
        error_message = cancelled.error_message,
        finished_at = cancelled.finished_at
    FROM cancelled
    WHERE a.task_id = cancelled.id
      AND a.status = 'running'
    RETURNING a.id
),
dropped AS (
    DELETE FROM gateway_task_admissions AS a
    USING cancelled
    WHERE a.task_id = cancelled.id
    RETURNING a.task_id
),
event AS (
    INSERT INTO gateway_task_events (task_id, seq, event_type, status, message, payload, created_at)
    SELECT cancelled.id,
           cancelled.last_event_seq,
           'task.cancelled',
           'cancelled',
           cancelled.error_message,
           pg_catalog.jsonb_build_object('error_code', cancelled.error_code),
           cancelled.finished_at
    FROM cancelled
    RETURNING task_id
)
SELECT cancelled.id
FROM cancelled;

-- name: TaskUnclaim :execrows
-- Puts back a task whose claimer left before TaskClaimNext's answer came
-- back (its context ended after the statement was sent): no worker runs
-- it. Fenced by the claim's execution token: a task finished, reclaimed or
-- claimed again since is left alone (0 rows). The task is queued again,
-- due as before (next_run_at unchanged) and with its queue places; its
-- attempt is cancelled (error_code abandoned, retryable); a task.queued
-- event records why. Not a requeue: requeue_count, which caps the
-- requeues of tasks whose worker died, is unchanged. The attempt holds no
-- reservation or lease: taking one needs its id.
-- Locks: FOR NO KEY UPDATE on the task row; row lock on its running attempt.
-- Index: gateway_tasks_pkey; gateway_task_attempts_running_idx.
WITH clock AS (
    SELECT coalesce(sqlc.narg('now')::timestamptz, now()) AS now
),
unclaimed AS (
    UPDATE gateway_tasks AS t
    SET status = 'queued',
        locked_by = NULL,
        locked_at = NULL,
        heartbeat_at = NULL,
        execution_token = NULL,
        execution_lease_expires_at = NULL,
        last_event_seq = t.last_event_seq + 1,
        updated_at = clock.now
    FROM clock
    WHERE t.id = @task_id::uuid
      AND (t.status = 'running') IS TRUE
      AND t.execution_token = @token::uuid
    RETURNING t.id, t.attempt_count, t.last_event_seq, t.updated_at
),
attempt AS (
    UPDATE gateway_task_attempts AS a
    SET status = 'cancelled',
        retryable = true,
        error_code = 'abandoned',
        error_message = 'the caller of ClaimTask left before its answer came back',
        finished_at = unclaimed.updated_at
    FROM unclaimed
    WHERE a.task_id = unclaimed.id
      AND a.status = 'running'
    RETURNING a.id
),
event AS (
    INSERT INTO gateway_task_events (task_id, seq, event_type, status, message, payload, created_at)
    SELECT unclaimed.id,
           unclaimed.last_event_seq,
           'task.queued',
           'queued',
           'the caller of ClaimTask left before its answer came back',
           pg_catalog.jsonb_build_object('reason', 'claim_abandoned', 'attempt_no', unclaimed.attempt_count),
           unclaimed.updated_at
    FROM unclaimed
    RETURNING task_id
)
SELECT unclaimed.id
FROM unclaimed;

-- name: TaskGet :one
-- One task, with the id of its running attempt (NULL when none runs).
-- Locks: none (MVCC read).
-- Index: gateway_tasks_pkey; gateway_task_attempts_running_idx (the
-- planner probes the task's running attempt through it, filtering on
-- attempt_no; gateway_task_attempts_task_id_attempt_no_key would serve as
-- well).
SELECT t.id,
       t.status,
       t.async_mode,
       t.kind,
       t.payload,
       t.error,
       t.error_code,
       t.error_message,
       t.locked_by,
       t.execution_token,
       t.execution_lease_expires_at,
       t.attempt_count,
       t.requeue_count,
       t.last_event_seq,
       t.next_run_at,
       t.created_at,
       t.updated_at,
       t.finished_at,
       (SELECT a.id
        FROM gateway_task_attempts AS a
        WHERE a.task_id = t.id
          AND a.attempt_no = t.attempt_count
          AND a.status = 'running') AS attempt_id
FROM gateway_tasks AS t
WHERE t.id = @task_id::uuid;

-- name: TaskHeartbeatLock :exec
-- First statement of HeartbeatTask's batch (one round trip, one
-- transaction), before TaskHeartbeat: locks the task row when it runs under
-- the token, so that TaskHeartbeat, whose snapshot follows this lock, finds
-- the row held and waits for nothing, and reads the clock for the new
-- expiry after any wait. An UPDATE computes its new values before it
-- waits for the row, and goes on with them when the holder only locked it
-- (no update to re-read), as an attach does (FOR SHARE, AttemptAttachLock)
-- until the end of a caller's transaction: a heartbeat that waited for one
-- longer than its TTL renewed the lease to a time already past, and Recover
-- took the task from its live worker.
-- A statement of its own, not a locking read in TaskHeartbeat's WITH: an
-- UPDATE reaches a row only from the version its snapshot sees. When the
-- row was updated after that snapshot (a heartbeat, an AppendEvent) beside
-- an admission's FOR KEY SHARE still held (the old version's xmax then a
-- MultiXact of the committed update and the live key share), the UPDATE
-- asked for the old version's tuple lock while the locking read's lock on
-- the newest version was held; a FinishTask (TaskFinishLock), an attach or
-- another heartbeat that had the tuple lock waited under it for that
-- newest version: SQLSTATE 40P01 (reverted 7bb0807;
-- TestHeartbeatWaitingBesideFinishTaskForAnUpdatedRowDoesNotDeadlock).
-- Here the row lock is acquired once, as the UPDATE alone acquired it, and
-- TaskHeartbeat's snapshot sees the version this statement locked.
-- No row (nothing locked, nothing waited for) when the task is not running
-- under the token: TaskHeartbeat then reports it as it finds it.
-- Locks: FOR NO KEY UPDATE on the task row (as TaskHeartbeat's UPDATE,
-- which then waits for nothing more: only FOR KEY SHARE can be held beside
-- it).
-- Index: gateway_tasks_pkey (`IS TRUE` on the status, as in TaskHeartbeat).
SELECT t.id
FROM gateway_tasks AS t
WHERE t.id = @task_id::uuid
  AND (t.status = 'running') IS TRUE
  AND t.execution_token = @token::uuid
FOR NO KEY UPDATE;

-- name: TaskHeartbeat :one
-- Extends the execution lease of a running task to now + ttl (now as this
-- statement reads the clock, not the transaction's start: see the head of
-- this file), fenced by the execution token. Run after TaskHeartbeatLock in
-- the same transaction, which holds the row: the clock is read after any
-- wait for it. A claim stays valid until someone takes the task
-- away (recovery reclaims only under this row's lock), so a heartbeat that
-- arrives after the lease expired but before recovery still succeeds.
-- Returns the task's status and the new expiry (NULL when not renewed: the
-- task is not running, or runs under another claim). No row for an unknown
-- task.
-- The row is updated whenever the statement's snapshot saw the task running
-- under the token (cur), and renewed only if its newest version, which the
-- UPDATE locks and re-reads after any wait, still is: so a claim that
-- changed while the statement waited for the lock is reported as it was
-- found under the lock, not as the snapshot saw it. That update writes the
-- row unchanged, once, in that race only, which TaskHeartbeatLock leaves
-- no room for (this statement's snapshot follows its lock; in a caller's
-- REPEATABLE READ transaction a row updated since the snapshot fails the
-- lock instead); the statement stays right on its own. A task the
-- snapshot saw otherwise is reported as seen (it cannot be running under
-- this token again).
-- Locks: FOR NO KEY UPDATE on the task row (the UPDATE; held since
-- TaskHeartbeatLock when the task runs under the token).
-- Index: gateway_tasks_pkey. The status test is written `IS TRUE` so that
-- the planner cannot match it to the partial index of running tasks
-- (gateway_tasks_running_idx): a generic plan made on few tasks read every
-- running task (and every dead entry) through that index instead of
-- probing the primary key, back when it was gateway_tasks_lease_expiry_idx,
-- which 00022 replaced (TestHotPathsReadOnlyTheirRowsAsTablesGrow).
-- The update is HOT (no index written): it changes no column that an
-- index names (gateway_tasks_running_idx is keyed on id since
-- schema/00022_hot_heartbeats.sql; TestHotPathUpdatesAreHeapOnly).
WITH cur AS (
    SELECT t.id, t.status, t.execution_token
    FROM gateway_tasks AS t
    WHERE t.id = @task_id::uuid
),
beat AS (
    UPDATE gateway_tasks AS t
    SET heartbeat_at = CASE WHEN (t.status = 'running' AND t.execution_token = @token::uuid) IS TRUE
                            THEN coalesce(sqlc.narg('now')::timestamptz, now()) ELSE t.heartbeat_at END,
        execution_lease_expires_at = CASE WHEN (t.status = 'running' AND t.execution_token = @token::uuid) IS TRUE
                                          THEN coalesce(sqlc.narg('now')::timestamptz, greatest(now(), clock_timestamp()))
                                               + pg_catalog.make_interval(secs => @lease_seconds::integer)
                                          ELSE t.execution_lease_expires_at END,
        updated_at = CASE WHEN (t.status = 'running' AND t.execution_token = @token::uuid) IS TRUE
                          THEN coalesce(sqlc.narg('now')::timestamptz, now()) ELSE t.updated_at END
    FROM cur
    WHERE t.id = cur.id
      AND (cur.status = 'running') IS TRUE
      AND cur.execution_token = @token::uuid
    RETURNING t.id, t.status, t.execution_lease_expires_at,
              ((t.status = 'running' AND t.execution_token = @token::uuid) IS TRUE) AS renewed
),
renewed AS (
    SELECT beat.id, beat.execution_lease_expires_at FROM beat WHERE beat.renewed
)
SELECT (CASE WHEN beat.id IS NULL THEN cur.status ELSE beat.status END)::text AS status,
       renewed.execution_lease_expires_at                                    AS renewed_until
FROM cur
LEFT JOIN beat ON beat.id = cur.id
LEFT JOIN renewed ON renewed.id = cur.id;

-- name: TaskFinishPlan :one
-- First step of finishing a task: checks the fence without locking and
-- lists the task's open reservations, whose counters the finishing batch
-- must lock first (lock order). No row for an unknown task.
-- read_committed: finishing reads what was linked to the task (by an
-- admission or an attach) only in READ COMMITTED, where TaskFinish's
-- snapshot follows TaskFinishLock; in a REPEATABLE READ transaction it
-- would miss what committed after the transaction's snapshot and leave it
-- open on the finished task, so the caller refuses then.
-- live_lease_ids: the task's unreleased leases, which the finishing batch
-- locks (in id order): in a caller's transaction, the lock-order guard
-- refuses the finish when one is below a lease an earlier operation of the
-- transaction locked.
-- CancelTask reads the same first (its status, not the token).
-- Locks: none (MVCC read).
-- Index: gateway_tasks_pkey; gateway_rate_limit_reservations_task_idx (all
-- of the task's reservations, a few; `IS TRUE` keeps the status test from
-- matching a partial index of open rows, as in CounterLockForReservations);
-- gateway_concurrency_leases_task_idx (all of the task's leases, a few;
-- `IS TRUE` likewise, as in TaskFinish).
SELECT t.status,
       (t.execution_token IS NOT DISTINCT FROM @token::uuid)::boolean AS token_matches,
       (current_setting('transaction_isolation') = 'read committed')::boolean AS read_committed,
       coalesce((SELECT pg_catalog.array_agg(r.id ORDER BY r.id)
                 FROM gateway_rate_limit_reservations AS r
                 WHERE r.task_id = t.id
                   AND (r.status = 'reserved') IS TRUE), '{}')::uuid[] AS open_reservation_ids,
       coalesce((SELECT pg_catalog.array_agg(x.id ORDER BY x.id)
                 FROM gateway_concurrency_leases AS x
                 WHERE x.task_id = @task_id::uuid
                   AND (x.released_at IS NULL) IS TRUE), '{}')::uuid[] AS live_lease_ids
FROM gateway_tasks AS t
WHERE t.id = @task_id::uuid;

-- name: TaskFinishLock :one
-- Second step of finishing a task, in the finishing batch after the
-- counters of its planned reservations (lock order: counters, then this
-- row): locks the task row, so that TaskFinish, which follows it, takes
-- its snapshot only once an attach linking a grant to the task has
-- committed (an attach holds the task row FOR SHARE: AttemptAttachLock),
-- and releases the leases it linked. TaskFinish alone would wait for that
-- attach on this row with a snapshot taken before it, blind to its links.
-- FOR UPDATE, not NO KEY UPDATE: it also conflicts with the FOR KEY SHARE
-- that an admission's inserts take on their task, so that an admission in
-- flight is usually waited for here; TaskFenceLock, next, is what
-- guarantees the exclusion. CancelTask takes the same locks, for the same
-- reasons, before TaskCancel (and so makes ClaimTask skip the row while it
-- cancels).
-- Returns the task's status as locked: after waiting for a transaction
-- that held the row, the status it committed (CancelTask's refusal names
-- it, not a later read, by which the task may be queued again). No row
-- for an unknown task.
-- Locks: FOR UPDATE on the task row.
-- Index: gateway_tasks_pkey.
SELECT t.status
FROM gateway_tasks AS t
WHERE t.id = @task_id::uuid
FOR UPDATE;

-- name: TaskFenceLock :exec
-- Third step of finishing (or cancelling) a task, right after
-- TaskFinishLock: takes the task's fence exclusively
-- (pgadmit_task_fence_key), which an admission for the task takes shared
-- once its rows are written (pgadmit_task_recheck). The lock manager makes
-- one wait for the other's commit: an admission that took it first is
-- settled by TaskFinish, whose snapshot follows this lock; one that comes
-- later finds the task finished and is rolled back. The task row's own
-- locks (FOR UPDATE here, FOR KEY SHARE by the admission's foreign keys)
-- are not enough: PostgreSQL can grant the key share beside a FOR UPDATE
-- taken while it looked (schema/00020_task_fence_lock.sql). Only
-- admissions for this task wait, only while it finishes.
-- Locks: pg_advisory_xact_lock on the task's fence key (after the task
-- row, as admissions take it: lock order counters, scopes, task row,
-- task fence).
-- Index: none.
SELECT pg_advisory_xact_lock(pgadmit_task_fence_key(@task_id::uuid));

-- name: TaskFinish :one
-- Finishes a running task as succeeded, failed or cancelled, fenced by its
-- execution token: sets the final status and error, finishes the running
-- attempt with the same status, releases the task's unreleased concurrency
-- leases (reason task_finished), deletes its queue admissions and appends
-- the final event (task.completed, task.failed or task.cancelled). No row
-- when the token is stale or the task is not running; then nothing changes.
-- Open reservations are settled by AdmissionSettle in the same batch,
-- after CounterLockForReservations (lock order: counters, then this row):
-- those of @planned_reservation_ids, read by TaskFinishPlan. The task's
-- open reservations that are not among them (linked to it since, by an
-- attach or an admission that committed before this statement began) come
-- back as late_reservation_ids, for the caller to settle after the commit
-- (their counters cannot be locked after this row).
-- Run after TaskFinishLock and TaskFenceLock in the same transaction.
-- Locks: the task row (held FOR UPDATE since TaskFinishLock); row locks on its running
-- attempt, its unreleased leases (in id order, as every statement that
-- locks several leases takes them: in the order the index returns them,
-- which each renewal changes, this could deadlock with a heartbeat) and its
-- admission rows.
-- Index: gateway_tasks_pkey (`IS TRUE` on the status, as in TaskHeartbeat);
-- gateway_task_attempts_running_idx;
-- gateway_concurrency_leases_task_idx (all of the task's leases, a few;
-- `IS TRUE` keeps the released_at test from matching a partial index of
-- live leases, as in CounterLockForReservations; the task id is a value,
-- not a join, so that the index is probed for it even when a VACUUM run
-- while no lease had a task recorded the index as empty, where a join
-- read the whole index), then gateway_concurrency_leases_pkey (the update
-- of each lease locked); gateway_task_admissions_pkey;
-- gateway_rate_limit_reservations_task_idx (late reservations, as in
-- TaskFinishPlan).
WITH clock AS (
    SELECT coalesce(sqlc.narg('now')::timestamptz, now()) AS now
),
finished AS (
    UPDATE gateway_tasks AS t
    SET status = @status::text,
        error = sqlc.narg('error')::jsonb,
        error_code = sqlc.narg('error_code')::text,
        error_message = sqlc.narg('error_message')::text,
        execution_token = NULL,
        execution_lease_expires_at = NULL,
        heartbeat_at = clock.now,
        finished_at = clock.now,
        last_event_seq = t.last_event_seq + 1,
        updated_at = clock.now
    FROM clock
    WHERE t.id = @task_id::uuid
      AND (t.status = 'running') IS TRUE
      AND t.execution_token = @token::uuid
    RETURNING t.id, t.status, t.async_mode, t.kind, t.payload, t.error, t.error_code,
              t.error_message, t.locked_by, t.execution_token, t.execution_lease_expires_at,
              t.attempt_count, t.requeue_count, t.last_event_seq, t.next_run_at,
              t.created_at, t.updated_at, t.finished_at
),
attempt AS (
    UPDATE gateway_task_attempts AS a
    SET status = finished.status,
        retryable = @retryable::boolean,
        error_code = finished.error_code,
        error_message = finished.error_message,
        finished_at = finished.finished_at
    FROM finished
    WHERE a.task_id = finished.id
      AND a.status = 'running'
    RETURNING a.id
),
released AS (
    UPDATE gateway_concurrency_leases AS l
    SET released_at = finished.finished_at,
        reason = 'task_finished'
    FROM finished,
         (SELECT x.id
          FROM gateway_concurrency_leases AS x
          WHERE x.task_id = (SELECT f.id FROM finished AS f)
            AND (x.released_at IS NULL) IS TRUE
          ORDER BY x.id
          FOR UPDATE OF x) AS locked
    WHERE l.id = locked.id
    RETURNING l.id
),
dropped AS (
    DELETE FROM gateway_task_admissions AS a
    USING finished
    WHERE a.task_id = finished.id
    RETURNING a.task_id
),
event AS (
    INSERT INTO gateway_task_events (task_id, seq, event_type, status, message, payload, created_at)
    SELECT finished.id,
           finished.last_event_seq,
           CASE finished.status
               WHEN 'succeeded' THEN 'task.completed'
               WHEN 'failed' THEN 'task.failed'
               ELSE 'task.cancelled'
           END,
           finished.status,
           finished.error_message,
           jsonb_strip_nulls(pg_catalog.jsonb_build_object('error_code', finished.error_code)),
           finished.finished_at
    FROM finished
    RETURNING task_id
)
SELECT finished.id,
       finished.status,
       finished.async_mode,
       finished.kind,
       finished.payload,
       finished.error,
       finished.error_code,
       finished.error_message,
       finished.locked_by,
       finished.execution_token,
       finished.execution_lease_expires_at,
       finished.attempt_count,
       finished.requeue_count,
       finished.last_event_seq,
       finished.next_run_at,
       finished.created_at,
       finished.updated_at,
       finished.finished_at,
       (SELECT count(*) FROM attempt)::integer  AS finished_attempts,
       (SELECT count(*) FROM released)::integer AS released_leases,
       (SELECT count(*) FROM dropped)::integer  AS deleted_admissions,
       coalesce((SELECT pg_catalog.array_agg(r.id ORDER BY r.id)
                 FROM gateway_rate_limit_reservations AS r
                 WHERE r.task_id = finished.id
                   AND (r.status = 'reserved') IS TRUE
                   AND NOT (r.id = ANY(@planned_reservation_ids::uuid[]))), '{}')::uuid[] AS late_reservation_ids
FROM finished;

-- name: TaskCancel :one
-- Cancels a queued task for its owner (CancelTask), in the batch that
-- FinishTask's steps make for a finish: CounterLockForReservations on the
-- task's open reservations (read by TaskFinishPlan), TaskFinishLock, this
-- statement, then TaskReleaseIfFinished. Fenced by the status alone: a task
-- that a worker claimed (or that finished) since it was read is left as it
-- is (no row). Sets it cancelled (error_code cancelled_while_queued, the
-- caller's reason as error_message), releases its unreleased concurrency
-- leases (reason task_finished), deletes its queue admissions (their
-- places count again) and appends a task.cancelled event. A queued task
-- has no running attempt (a claim starts one; recovery and an unclaim end
-- it before they queue the task again), so its attempts are left alone.
-- The open reservations not among @planned_reservation_ids (linked since
-- the plan read them, by a Reserve that committed before this statement
-- began) come back as late_reservation_ids, for the caller to release
-- after the commit, as TaskFinish's. Its columns are TaskFinish's, in
-- TaskFinish's order (finished_attempts 0), so that one conversion reads
-- both.
-- Against ClaimTask: TaskFinishLock holds the row FOR UPDATE, which
-- TaskClaimNext's FOR NO KEY UPDATE SKIP LOCKED skips; a claim that locked
-- the row first is waited for, and this statement, whose snapshot follows
-- the lock, then finds the task running and changes nothing (the status
-- TaskFinishLock returned says why).
-- Locks: the task row (held FOR UPDATE since TaskFinishLock); row locks on
-- its unreleased leases (in id order, as TaskFinish) and its admission
-- rows.
-- Index: gateway_tasks_pkey (`IS TRUE` on the status, as in TaskHeartbeat,
-- keeps it from matching gateway_tasks_runnable_idx);
-- gateway_concurrency_leases_task_idx, then gateway_concurrency_leases_pkey
-- (as in TaskFinish); gateway_task_admissions_pkey;
-- gateway_rate_limit_reservations_task_idx (late reservations, as in
-- TaskFinishPlan).
WITH clock AS (
    SELECT coalesce(sqlc.narg('now')::timestamptz, now()) AS now
),
cancelled AS (
    UPDATE gateway_tasks AS t
    SET status = 'cancelled',
        error_code = 'cancelled_while_queued',
        error_message = sqlc.narg('reason')::text,
        finished_at = clock.now,
        last_event_seq = t.last_event_seq + 1,
        updated_at = clock.now
    FROM clock
    WHERE t.id = @task_id::uuid
      AND (t.status = 'queued') IS TRUE
    RETURNING t.id, t.status, t.async_mode, t.kind, t.payload, t.error, t.error_code,
              t.error_message, t.locked_by, t.execution_token, t.execution_lease_expires_at,
              t.attempt_count, t.requeue_count, t.last_event_seq, t.next_run_at,
              t.created_at, t.updated_at, t.finished_at
),
released AS (
    UPDATE gateway_concurrency_leases AS l
    SET released_at = cancelled.finished_at,
        reason = 'task_finished'
    FROM cancelled,
         (SELECT x.id
          FROM gateway_concurrency_leases AS x
          WHERE x.task_id = (SELECT c.id FROM cancelled AS c)
            AND (x.released_at IS NULL) IS TRUE
          ORDER BY x.id
          FOR UPDATE OF x) AS locked
    WHERE l.id = locked.id
    RETURNING l.id
),
dropped AS (
    DELETE FROM gateway_task_admissions AS a
    USING cancelled
    WHERE a.task_id = cancelled.id
    RETURNING a.task_id
),
event AS (
    INSERT INTO gateway_task_events (task_id, seq, event_type, status, message, payload, created_at)
    SELECT cancelled.id,
           cancelled.last_event_seq,
           'task.cancelled',
           'cancelled',
           cancelled.error_message,
           pg_catalog.jsonb_build_object('error_code', cancelled.error_code),
           cancelled.finished_at
    FROM cancelled
    RETURNING task_id
)
SELECT cancelled.id,
       cancelled.status,
       cancelled.async_mode,
       cancelled.kind,
       cancelled.payload,
       cancelled.error,
       cancelled.error_code,
       cancelled.error_message,
       cancelled.locked_by,
       cancelled.execution_token,
       cancelled.execution_lease_expires_at,
       cancelled.attempt_count,
       cancelled.requeue_count,
       cancelled.last_event_seq,
       cancelled.next_run_at,
       cancelled.created_at,
       cancelled.updated_at,
       cancelled.finished_at,
       0::integer                               AS finished_attempts,
       (SELECT count(*) FROM released)::integer AS released_leases,
       (SELECT count(*) FROM dropped)::integer  AS deleted_admissions,
       coalesce((SELECT pg_catalog.array_agg(r.id ORDER BY r.id)
                 FROM gateway_rate_limit_reservations AS r
                 WHERE r.task_id = cancelled.id
                   AND (r.status = 'reserved') IS TRUE
                   AND NOT (r.id = ANY(@planned_reservation_ids::uuid[]))), '{}')::uuid[] AS late_reservation_ids
FROM cancelled;

-- name: TaskReleaseIfFinished :one
-- Last step of CancelTask's batch, after TaskCancel, and of FinishTask's,
-- after TaskFinish: releases (reason task_finished) the task's open
-- reservations that TaskFinishPlan read, whose counters
-- CounterLockForReservations locked at the batch's start (lock order:
-- counters, then the task row). Only when the task is finished now: when a
-- claim won the task row, TaskCancel changed nothing, and when the token
-- went stale (recovery requeued the task, another worker claimed it),
-- TaskFinish changed nothing; the reservations stay the task's (no row
-- from gateway_tasks, so pgadmit_settle is not called). Returns how many
-- it released.
-- Locks: the task row (held FOR UPDATE since TaskFinishLock); then as
-- AdmissionSettle: the counters (already held) and the reservation rows.
-- Index: gateway_tasks_pkey; then as AdmissionSettle (reservations by
-- primary key, counters by primary key).
SELECT count(*) FILTER (WHERE s.settled AND NOT s.is_lease)::integer AS released_reservations
FROM gateway_tasks AS t
CROSS JOIN LATERAL pgadmit_settle(
    @reservation_ids::uuid[], NULL::text[], NULL::text[], NULL::text[], NULL::integer[], NULL::timestamptz[],
    pg_catalog.array_fill('released'::text, ARRAY[pg_catalog.cardinality(@reservation_ids::uuid[])]),
    pg_catalog.array_fill(0::numeric, ARRAY[pg_catalog.cardinality(@reservation_ids::uuid[])]),
    pg_catalog.array_fill('task_finished'::text, ARRAY[pg_catalog.cardinality(@reservation_ids::uuid[])]),
    '{}'::uuid[], '{}'::text[],
    -- t.finished_at (when the task was cancelled) makes the call lateral:
    -- it runs only for the row that passed the test below.
    t.finished_at
) AS s
WHERE t.id = @task_id::uuid
  AND (t.status IN ('succeeded', 'failed', 'cancelled')) IS TRUE;

-- name: TaskTotalsByKind :one
-- What the tasks of one kind left: how many are unfinished (queued or
-- running) and how many succeeded, the queue places
-- (queue_size admissions) they still hold and their reservations still
-- open. `pgadmit bench` reads it after its task workload (T1), whose tasks
-- take a kind of their own in each run and round, and checks that every
-- task ended and left nothing held.
-- Locks: none (MVCC read).
-- Index: none for the tasks: a sequential scan of gateway_tasks (kind is a
-- label for operators, not indexed); a check after a benchmark, not a path
-- any request takes. What they hold: gateway_task_admissions_pkey (leading
-- task_id) and gateway_rate_limit_reservations_open_task_idx (partial:
-- open reservations), or a hash join over them when the tasks are many.
WITH kind_tasks AS (
    SELECT t.id, t.status
    FROM gateway_tasks AS t
    WHERE t.kind = @kind::text
)
SELECT (SELECT count(*) FROM kind_tasks AS k WHERE k.status IN ('queued', 'running'))::bigint AS unfinished,
       (SELECT count(*) FROM kind_tasks AS k WHERE k.status = 'succeeded')::bigint            AS succeeded,
       (SELECT count(*)
        FROM gateway_task_admissions AS a
        WHERE a.task_id IN (SELECT k.id FROM kind_tasks AS k))::bigint                   AS queue_places,
       (SELECT count(*)
        FROM gateway_rate_limit_reservations AS r
        WHERE r.task_id IN (SELECT k.id FROM kind_tasks AS k)
          AND r.status = 'reserved')::bigint                                             AS open_reservations;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Tasks: gateway_tasks, with the attempt, event and admission rows that each
-- lifecycle step writes in the same statement.
--
-- Life of a task: queued -> running -> succeeded | failed | cancelled.
-- An async task is created queued and claimed by a worker (TaskClaimNext); a
-- sync task is created already running (its caller runs it at once), so no
-- sync task ever sits queued without an owner. A running task carries an
-- execution token (fencing) and an execution lease; recovery reclaims a task
-- whose lease expired (recovery.sql).
--
-- Lock order (counters.sql): a transaction that also settles reservations
-- locks their counter rows before it touches a task row. Task rows are
-- locked FOR NO KEY UPDATE (UPDATEs of non-key columns), which does not
-- conflict with the FOR KEY SHARE that inserting a reservation, lease or
-- attempt takes on its task: admissions do not wait for a heartbeat, a
-- claim or recovery. FinishTask and CancelTask alone lock the row FOR
-- UPDATE (TaskFinishLock), which does conflict, and then take the task's
-- fence (TaskFenceLock), an advisory lock that an admission for the task
-- takes shared: an admission for the task and its finishing wait for each
-- other, so that what the admission writes is either settled by
-- FinishTask or rolled back (pgadmit_task_recheck). The fence, not the
-- row, is what makes them wait: PostgreSQL can grant a key share beside a
-- FOR UPDATE (schema/00020_task_fence_lock.sql).
-- An attach takes FOR SHARE on the task row (AttemptAttachLock), which
-- conflicts with every lifecycle step: an attach and a lifecycle step of
-- one task wait for each other, so that what the attach links is either
-- settled by the step or refused.
--
-- Each statement takes an optional @now (NULL: the database's now()) for
-- every time it records or compares, so tests drive time instead of
-- sleeping. An execution lease a statement sets (TaskCreate, TaskClaimNext,
-- TaskHeartbeat) runs from the clock read by that statement instead
-- (greatest(now(), clock_timestamp())), as a concurrency lease does
-- (schema/00018_lease_clock_after_locks.sql): now() is the transaction's
-- start, which for TaskCreate is before its wait for the queue scopes'
-- locks, and in a caller's transaction may be any time ago; a lease counted
-- from it was born expired when the wait, or the transaction, had lasted
-- longer than its TTL, and Recover took the task from its live worker.
