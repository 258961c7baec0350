-- name: TaskAdmissionLockScopes :exec
-- Serializes task creation on the same queue scopes: one transaction-scoped
-- advisory lock per distinct (scope_type, scope_key), taken in lock-key order
-- so that creators listing scopes in different orders cannot deadlock. The
-- key is a 64-bit hash of 'pgadmit/queue/...' (disjoint from the
-- concurrency leases' 'pgadmit/concurrent/...'), or, when @lock_prefix is
-- not 0, @lock_prefix in the upper 32 bits and a 32-bit hash in the lower
-- ones (as River's AdvisoryLockPrefix): the host application, which shares
-- the database's advisory-lock key space, can keep its own keys apart. Every
-- process creating tasks in one database must use the same prefix. Held
-- until the transaction ends.
-- Lock order: after counter rows (a creation touches none), before any row.
-- Locks: pg_advisory_xact_lock on the key of each queue scope.
-- Index: none (no table access).
SELECT pg_advisory_xact_lock(s.lock_key)
FROM (
    SELECT DISTINCT
           CASE WHEN @lock_prefix::integer = 0
                THEN pg_catalog.hashtextextended(q.lock_text, 0)
                ELSE ((@lock_prefix::integer)::bigint << 32) | (hashtext(q.lock_text)::bigint & 4294967295)
           END AS lock_key
    FROM (
        SELECT 'pgadmit/queue/' || length(u.scope_type)::text || ':' || u.scope_type || '/' || u.scope_key AS lock_text
        FROM (
            SELECT pg_catalog.unnest(@scope_types::text[]) AS scope_type,
                   pg_catalog.unnest(@scope_keys::text[])  AS scope_key
        ) AS u
    ) AS q
) AS s
ORDER BY s.lock_key;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Queue admissions: gateway_task_admissions.
--
-- A queue_size limit admits a new task on a scope only while the scope holds
-- fewer admission rows than the limit. One row per (unfinished task, queue
-- scope); finishing the task (or recovery failing it) deletes its rows. A
-- requeued async task keeps its rows: it is still waiting in the queue.
--
-- Exactness: there is no row to lock for "the queue of scope S", so creation
-- takes a transaction-scoped advisory lock per queue scope first
-- (TaskAdmissionLockScopes), then counts and inserts in one statement
-- (TaskCreate) whose snapshot is taken after the locks were granted.
