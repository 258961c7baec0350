-- +goose NO TRANSACTION
-- Indexes for bounded tables, built without blocking admissions.
--
-- * Deleting a finished task (Prune's task retention) sets task_id to NULL
--   in the reservation and lease ledgers (ON DELETE SET NULL): the foreign
--   key's trigger runs UPDATE ... WHERE task_id = $1 once per deleted task,
--   which needs an index on every row's task_id, not only on the open or
--   unreleased ones. Rows without a task are left out: the trigger never
--   looks for NULL.
-- * Recovery releases what an attempt that is over still holds: it starts
--   from the open reservations and unreleased leases that name an attempt,
--   so these get an index of exactly that (live state, small), instead of
--   whichever of two broader ones the planner picked.
-- * Prune walks finished tasks in (finished_at, id) order from where its
--   last run stopped; the index of finished tasks gains id, so each page is
--   read in order without a sort.
--
-- CREATE INDEX CONCURRENTLY does not block writes while it builds (a plain
-- CREATE INDEX would hold back every admission on these tables for as long
-- as the build takes), but cannot run in a transaction: hence NO
-- TRANSACTION, one statement at a time. Each index is dropped first if it
-- exists, so that running this again after an interrupted build replaces
-- the invalid index it left.

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS gateway_rate_limit_reservations_task_idx;
CREATE INDEX CONCURRENTLY gateway_rate_limit_reservations_task_idx ON gateway_rate_limit_reservations (task_id)
    WHERE task_id IS NOT NULL;
COMMENT ON INDEX gateway_rate_limit_reservations_task_idx IS
    'Serves the ON DELETE SET NULL of tasks (Prune''s task retention deletes finished tasks; the ledger rows stay, so counters keep matching them).';

DROP INDEX CONCURRENTLY IF EXISTS gateway_concurrency_leases_task_idx;
CREATE INDEX CONCURRENTLY gateway_concurrency_leases_task_idx ON gateway_concurrency_leases (task_id)
    WHERE task_id IS NOT NULL;
COMMENT ON INDEX gateway_concurrency_leases_task_idx IS
    'Serves the ON DELETE SET NULL of tasks (Prune''s task retention deletes finished tasks).';

DROP INDEX CONCURRENTLY IF EXISTS gateway_rate_limit_reservations_open_attempt_idx;
CREATE INDEX CONCURRENTLY gateway_rate_limit_reservations_open_attempt_idx ON gateway_rate_limit_reservations (attempt_id)
    WHERE status = 'reserved' AND attempt_id IS NOT NULL;
COMMENT ON INDEX gateway_rate_limit_reservations_open_attempt_idx IS
    'Open reservations attached to an attempt (live state, small): recovery''s search for those of attempts that are over, and the doctor''s.';

DROP INDEX CONCURRENTLY IF EXISTS gateway_concurrency_leases_live_attempt_idx;
CREATE INDEX CONCURRENTLY gateway_concurrency_leases_live_attempt_idx ON gateway_concurrency_leases (attempt_id)
    WHERE released_at IS NULL AND attempt_id IS NOT NULL;
COMMENT ON INDEX gateway_concurrency_leases_live_attempt_idx IS
    'Unreleased leases attached to an attempt (live state, small): recovery''s search for those of attempts that are over, and the doctor''s.';

DROP INDEX CONCURRENTLY IF EXISTS gateway_tasks_finished_id_idx;
CREATE INDEX CONCURRENTLY gateway_tasks_finished_id_idx ON gateway_tasks (finished_at, id)
    WHERE status IN ('succeeded', 'failed', 'cancelled');
COMMENT ON INDEX gateway_tasks_finished_id_idx IS
    'Finished tasks in (finished_at, id) order: Prune deletes those past the task retention, and walks those past the cutoff from its saved position to delete their events.';
DROP INDEX CONCURRENTLY IF EXISTS gateway_tasks_finished_idx;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS gateway_tasks_finished_idx;
CREATE INDEX CONCURRENTLY gateway_tasks_finished_idx ON gateway_tasks (finished_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled');
COMMENT ON INDEX gateway_tasks_finished_idx IS 'Serves prune of events of long-finished tasks.';
DROP INDEX CONCURRENTLY IF EXISTS gateway_tasks_finished_id_idx;
DROP INDEX CONCURRENTLY IF EXISTS gateway_concurrency_leases_live_attempt_idx;
DROP INDEX CONCURRENTLY IF EXISTS gateway_rate_limit_reservations_open_attempt_idx;
DROP INDEX CONCURRENTLY IF EXISTS gateway_concurrency_leases_task_idx;
DROP INDEX CONCURRENTLY IF EXISTS gateway_rate_limit_reservations_task_idx;
