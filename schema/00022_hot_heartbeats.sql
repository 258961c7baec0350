-- +goose NO TRANSACTION
-- A task's heartbeat is a HOT update: the partial index of running tasks
-- is keyed on the task's id, not on its execution lease's expiry.
--
-- PostgreSQL updates a row heap-only (HOT: the new version on the same
-- page, no index entry written) only when no column that an index names,
-- as a key, an INCLUDE column or in its predicate, changes. A heartbeat
-- (TaskHeartbeat) changes execution_lease_expires_at, heartbeat_at and
-- updated_at. gateway_tasks_lease_expiry_idx was keyed on
-- execution_lease_expires_at, so every heartbeat wrote a new entry into it
-- and into the primary key, and left the old entries dead until a vacuum.
-- Those dead entries hold expiries that have passed: exactly the range
-- that recovery's search for expired tasks (RecoveryTaskFindExpired) reads.
-- With 2,000 running tasks and three heartbeats each, and no vacuum, a
-- search that found nothing read 1,709 buffers; through this index, 85.
--
-- Recovery now reads every running task (live state: the requests and jobs
-- in flight) and keeps the batch whose leases expired first, as it reads
-- every unreleased lease to release the expired ones. Claiming,
-- finishing and reclaiming a task change its status, and so stay non-HOT.
--
-- Built CONCURRENTLY (no write blocked while it builds), so NO TRANSACTION,
-- one statement at a time; dropped first if it exists, so that running this
-- again after an interrupted build replaces the invalid index it left.

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS gateway_tasks_running_idx;
CREATE INDEX CONCURRENTLY gateway_tasks_running_idx ON gateway_tasks (id)
    WHERE status = 'running';
COMMENT ON INDEX gateway_tasks_running_idx IS
    'Serves recovery''s search for running tasks with an expired execution lease (every running task, read whole: live state). Keyed on id, which a heartbeat does not change, so that heartbeats are HOT updates.';
DROP INDEX CONCURRENTLY IF EXISTS gateway_tasks_lease_expiry_idx;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS gateway_tasks_lease_expiry_idx;
CREATE INDEX CONCURRENTLY gateway_tasks_lease_expiry_idx ON gateway_tasks (execution_lease_expires_at)
    WHERE status = 'running';
COMMENT ON INDEX gateway_tasks_lease_expiry_idx IS 'Serves recovery''s search for running tasks with an expired execution lease.';
DROP INDEX CONCURRENTLY IF EXISTS gateway_tasks_running_idx;
