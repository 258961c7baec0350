-- An admission for a task and a finish of that task exclude each other by a
-- lock of the task's own, not by the task row's locks.
--
-- Since 00011, FinishTask and CancelTask lock the task row FOR UPDATE
-- (TaskFinishLock) and an admission's inserts take it FOR KEY SHARE (their
-- foreign keys), then check the task again (pgadmit_task_recheck): the two
-- locks conflict, so one of the two transactions was to wait for the
-- other's commit. PostgreSQL 15 does not always make it wait. When a key
-- share finds the row held by a transaction it need not wait for (a
-- locker, or a no-key update in progress), heap_lock_tuple releases the
-- page, follows the row's newer versions if any, takes the page again and
-- goes on if the row was not updated meanwhile: a FOR UPDATE taken in that
-- moment (by a finish that was waiting for the holder, which ended) is
-- not looked at, and both locks are granted. The admission's recheck then
-- read the task still running, the finish read the task's reservations
-- and leases without the admission's, and what the admission wrote stayed
-- open on a finished task until Recover released it (reproduced on
-- 15.20: a foreign key's check granted beside a live FOR UPDATE on the
-- same row, 28 times in 20 s, when no-key updates of the row were rolled
-- back; TestTaskFencesRaceFinishTaskWithoutDeadlock failed once in about
-- 150 runs under load).
--
-- Now each side also takes a transaction-level advisory lock of the task
-- (pgadmit_task_fence_key): a finish exclusively, once it holds the task
-- row (TaskFenceLock, after TaskFinishLock); an admission shared, once its
-- rows are written (here, in pgadmit_task_recheck, before it reads the
-- task). The lock manager makes one of them wait for the other's commit,
-- and each reads after its lock: the finish sees what the admission wrote,
-- or the admission sees the task finished and is rolled back (P0T01), as
-- 00011 meant. Both take the lock after the task row, so the lock order
-- (counters, scopes, task row, task fence) is kept. Heartbeats, events and
-- recovery do not take it, so admissions do not wait for them.
--
-- pgadmit_task_recheck becomes VOLATILE: its reads must see what the
-- transactions it waited for committed, so each takes a snapshot of its
-- own after the lock (a STABLE function reads with its caller's). Down
-- restores it as 00011 made it and drops the key function.

-- +goose Up
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE FUNCTION pgadmit_task_fence_key(p_task_id uuid)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtextextended('pgadmit/task/' || p_task_id::text, 0)
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION pgadmit_task_fence_key(uuid) IS
    'The transaction advisory lock key of a task''s fence: taken exclusively by FinishTask and CancelTask (TaskFenceLock), shared by an admission for the task (pgadmit_task_recheck). Its own prefix, apart from the concurrency scopes'' keys.';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_task_recheck(p_task_ids uuid[], p_attempt_ids uuid[], p_admitted boolean[])
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
-- Raises SQLSTATE P0T01, rolling the statement back, when the task or
-- attempt of an admission that pgadmit_reserve or pgadmit_reserve_one has
-- just written (p_admitted[i]) no longer takes capacity
-- (pgadmit_task_refusal). Called once the admission's rows are inserted.
-- First takes each admitted task's fence shared (pgadmit_task_fence_key,
-- in key order), which FinishTask and CancelTask take exclusively once
-- they hold the task row: a finish that took it first is waited for, and
-- is seen here, finished; one that comes later waits for this
-- transaction's commit, and then settles what it wrote. The reads below
-- come after the lock, each with a snapshot of its own (VOLATILE).
-- Locks: pg_advisory_xact_lock_shared on each admitted task's fence key.
-- Index: gateway_tasks_pkey; gateway_task_attempts_pkey.
DECLARE
    v_refusal text;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(f.fence_key)
    FROM (
        SELECT DISTINCT pgadmit_task_fence_key(u.task_id) AS fence_key
        FROM unnest(p_task_ids, p_admitted) AS u(task_id, admitted)
        WHERE u.admitted AND u.task_id IS NOT NULL
    ) AS f
    ORDER BY f.fence_key;
    FOR i IN 1 .. coalesce(cardinality(p_task_ids), 0) LOOP
        IF p_admitted[i] AND (p_task_ids[i] IS NOT NULL OR p_attempt_ids[i] IS NOT NULL) THEN
            v_refusal := pgadmit_task_refusal(p_task_ids[i], p_attempt_ids[i]);
            IF v_refusal <> '' THEN
                RAISE EXCEPTION 'pgadmit: task % (attempt %): % while the admission was decided',
                    p_task_ids[i], p_attempt_ids[i], v_refusal
                    USING ERRCODE = 'P0T01';
            END IF;
        END IF;
    END LOOP;
END;
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION pgadmit_task_recheck(uuid[], uuid[], boolean[]) IS
    'Takes the fences of the tasks of an admission just written (shared), then rolls it back if its task finished while it was decided (SQLSTATE P0T01); called by pgadmit_reserve and pgadmit_reserve_one once their rows are written.';

-- +goose Down
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_task_recheck(p_task_ids uuid[], p_attempt_ids uuid[], p_admitted boolean[])
RETURNS void
LANGUAGE plpgsql STABLE AS $$
-- Raises SQLSTATE P0T01, rolling the statement back, when the task or
-- attempt of an admission that pgadmit_reserve or pgadmit_reserve_one has
-- just written (p_admitted[i]) no longer takes capacity
-- (pgadmit_task_refusal). Called once the admission's rows are inserted:
-- their foreign keys hold each task row FOR KEY SHARE, which conflicts
-- with the FOR UPDATE that FinishTask takes (TaskFinishLock). A FinishTask
-- that locked the task first was waited for, and is seen here, finished;
-- one that comes later waits for this statement's commit, and then
-- settles what it wrote. Without this check, an admission that passed the
-- first check (before its counters were locked) while the task was being
-- finished kept its reservations and leases open on a finished task.
-- Locks: none (reads; the rows are already held by the inserts).
-- Index: gateway_tasks_pkey; gateway_task_attempts_pkey.
DECLARE
    v_refusal text;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_task_ids), 0) LOOP
        IF p_admitted[i] AND (p_task_ids[i] IS NOT NULL OR p_attempt_ids[i] IS NOT NULL) THEN
            v_refusal := pgadmit_task_refusal(p_task_ids[i], p_attempt_ids[i]);
            IF v_refusal <> '' THEN
                RAISE EXCEPTION 'pgadmit: task % (attempt %): % while the admission was decided',
                    p_task_ids[i], p_attempt_ids[i], v_refusal
                    USING ERRCODE = 'P0T01';
            END IF;
        END IF;
    END LOOP;
END;
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION pgadmit_task_recheck(uuid[], uuid[], boolean[]) IS
    'Rolls back an admission whose task finished while it was decided (SQLSTATE P0T01); called by pgadmit_reserve and pgadmit_reserve_one once their rows are written.';

DROP FUNCTION pgadmit_task_fence_key(uuid);
