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

-- name: TaskAdmissionLockScopes :exec
-- Serializes task creation on the same queue scopes: one transaction-scoped
-- advisory lock per distinct (scope_type, scope_key), taken in lock-key order
-- so that creators listing scopes in different orders cannot deadlock. The
-- key space ('pgadmit/queue/...') is disjoint from the concurrency leases'
-- ('pgadmit/concurrent/...'). Held until the transaction ends.
-- Lock order: after counter rows (a creation touches none), before any row.
-- Locks: pg_advisory_xact_lock on hashtextextended of each queue scope.
-- Index: none (no table access).
SELECT pg_advisory_xact_lock(s.lock_key)
FROM (
    SELECT DISTINCT hashtextextended(
               'pgadmit/queue/' || length(q.scope_type)::text || ':' || q.scope_type || '/' || q.scope_key,
               0
           ) AS lock_key
    FROM (
        SELECT unnest(@scope_types::text[]) AS scope_type,
               unnest(@scope_keys::text[])  AS scope_key
    ) AS q
) AS s
ORDER BY s.lock_key;
