-- Comments only: the COMMENTs of columns, indexes and a table that no
-- longer said what the rows hold or which statements use the index, as a
-- review of every statement's plan on a loaded database found them
-- (PostgreSQL 15; 200,000 tasks, 1.15 million reservations, 300,000 leases,
-- 288,000 counters; custom and generic plans).
--
-- gateway_rate_limit_counters: reserved_value and used_value also hold the
-- Local blocks of gateway_rate_limit_allotments since 00006 (open blocks'
-- granted units, returned blocks' used amounts), which the reservations'
-- table comment and these two did not say. limit_value (00014) did not say
-- that a combined batch decided request by request writes the limit of
-- its last request on the counter, admitted or refused, so that a row can
-- hold more than its limit_value with nothing admitted past a limit: a
-- batch of limits 10, 10 and 4 on one counter, amounts 4 each, admits the
-- first two and leaves reserved_value 8, limit_value 4.
--
-- Indexes: gateway_concurrency_leases_live_scope_idx named a ReserveApply
-- that does not exist (it is pgadmit_reserve's count of a scope's live
-- leases); gateway_task_events_pkey said prune deletes events by id (it
-- deletes them by task, through gateway_task_events_task_seq_key; nothing
-- reads events by id); finishing, cancelling and reclaiming a task read
-- gateway_rate_limit_reservations_task_idx and
-- gateway_concurrency_leases_task_idx (their tests written IS TRUE, so
-- that no partial index of open rows matches them), not the partial
-- indexes of open reservations and live leases whose comments claimed them,
-- and the two task indexes said only that they serve the foreign keys;
-- gateway_task_attempts_running_idx serves every step that ends a task's
-- running attempt, not recovery alone; TaskClaimNext locks FOR NO KEY
-- UPDATE SKIP LOCKED, not FOR UPDATE; and the counters are locked in the
-- byte order of their key's columns (COLLATE "C"), which is not their
-- primary key's order under another collation.
--
-- COMMENT takes a SHARE UPDATE EXCLUSIVE lock on its table or index,
-- which no admission or maintenance statement conflicts with. Down
-- restores the comments as they were.

-- +goose Up
SET LOCAL lock_timeout = '5s';

COMMENT ON TABLE gateway_rate_limit_reservations IS
    'The ledger behind reserved_value and used_value: one row per admitted window limit. Open rows sum, with the granted units of the open Local blocks (gateway_rate_limit_allotments), to the counter''s reserved_value; committed rows'' actual amounts, with the used amounts of the returned blocks, to its used_value.';
COMMENT ON COLUMN gateway_rate_limit_counters.reserved_value IS
    'Sum of the amounts of this window''s open (reserved) reservations and of the granted units of its open Local blocks (gateway_rate_limit_allotments).';
COMMENT ON COLUMN gateway_rate_limit_counters.used_value IS
    'Sum of the actual amounts of this window''s committed reservations and of the used amounts of its returned Local blocks; may exceed the limit when actuals overshoot their estimates.';
COMMENT ON COLUMN gateway_rate_limit_counters.limit_value IS
    'Informational, not a bound of the row: every admission brings its own limit, and used_value + reserved_value may exceed this one. The limit of the last write in this window: an admission decided alone, its own limit (only when admitted); a combined batch that takes a counter''s requests whole, the smallest of their limits; a combined batch decided request by request, the limit of its last request on the counter, admitted or refused (when one was admitted); a row created empty (a batch refused, a Local block not granted), the limit asked with; a Local block granted or trimmed, that call''s limit.';
COMMENT ON COLUMN gateway_task_events.id IS
    'Surrogate key, in append order; events are read and deleted by task (task_id, seq), not by it.';

COMMENT ON INDEX gateway_rate_limit_counters_pkey IS
    'The counter of a scope, metric and window: admission, settlement and Local blocks find, lock and update rows through it (locked in the byte order of its columns, COLLATE "C": the lock order).';
COMMENT ON INDEX gateway_concurrency_leases_live_scope_idx IS
    'Serves the live-lease sum of a scope at admission (pgadmit_reserve, an index-only scan) and in inspect; recovery and prune may read it whole for expired leases (live state, small).';
COMMENT ON INDEX gateway_concurrency_leases_live_task_idx IS
    'Every unreleased lease (NULL task included), by task: recovery walks it in task order for the leases of finished tasks, and recovery and prune may read it whole for expired ones (live state, small). Finishing or reclaiming a task reads gateway_concurrency_leases_task_idx instead.';
COMMENT ON INDEX gateway_concurrency_leases_task_idx IS
    'Every lease of a task: finishing, cancelling and reclaiming a task list and release its unreleased ones, and Prune''s task retention checks that a task holds none; serves the ON DELETE SET NULL of tasks (Prune''s task retention deletes finished tasks).';
COMMENT ON INDEX gateway_rate_limit_reservations_open_task_idx IS
    'Every open reservation (NULL task included), by task: recovery finds the open reservations of the tasks it reclaims, and walks it in task order for those of finished tasks; prune reads it whole for open reservations that outlived their window (live state, small). Finishing a task reads gateway_rate_limit_reservations_task_idx instead.';
COMMENT ON INDEX gateway_rate_limit_reservations_task_idx IS
    'Every reservation of a task: finishing or cancelling a task lists its open ones, and Prune''s task retention checks that a task holds none; serves the ON DELETE SET NULL of tasks (Prune''s task retention deletes finished tasks; the ledger rows stay, so counters keep matching them).';
COMMENT ON INDEX gateway_task_attempts_running_idx IS
    'The running attempt of a task: finishing, cancelling, unclaiming and reclaiming a task end it, and reading a task finds it; recovery walks it in task order for running attempts of finished tasks (live state, small).';
COMMENT ON INDEX gateway_task_events_pkey IS
    'The identity key; no statement reads an event by it: events are read, and deleted, by task through gateway_task_events_task_seq_key.';
COMMENT ON INDEX gateway_tasks_runnable_idx IS
    'Serves TaskClaimNext (FOR NO KEY UPDATE SKIP LOCKED over due queued async tasks).';

-- +goose Down
SET LOCAL lock_timeout = '5s';

COMMENT ON TABLE gateway_rate_limit_reservations IS
    'The ledger behind reserved_value and used_value: one row per admitted window limit. Open rows sum to the counter''s reserved_value, committed rows'' actual amounts to its used_value.';
COMMENT ON COLUMN gateway_rate_limit_counters.reserved_value IS 'Sum of amounts of open (reserved) reservations of this window.';
COMMENT ON COLUMN gateway_rate_limit_counters.used_value IS 'Sum of actual amounts of committed reservations; may exceed the limit when actuals overshoot their estimates.';
COMMENT ON COLUMN gateway_rate_limit_counters.limit_value IS
    'Limit written by the last admission, or Local block grant or trim, in this window: an admission''s own limit; the smallest limit among the requests of a combined batch that takes them whole; the block''s limit for a block granted or trimmed. Informational: every admission brings its own limit.';
COMMENT ON COLUMN gateway_task_events.id IS 'Surrogate key, for deleting events in batches.';

COMMENT ON INDEX gateway_rate_limit_counters_pkey IS 'The counter of a scope, metric and window: admission locks and updates rows through it, in its order.';
COMMENT ON INDEX gateway_concurrency_leases_live_scope_idx IS 'Serves the live-lease sum of a scope in ReserveApply and inspect.';
COMMENT ON INDEX gateway_concurrency_leases_live_task_idx IS
    'Every unreleased lease (NULL task included), by task: releasing a task''s leases; recovery scans it whole for expired leases (live state, small).';
COMMENT ON INDEX gateway_concurrency_leases_task_idx IS
    'Serves the ON DELETE SET NULL of tasks (Prune''s task retention deletes finished tasks).';
COMMENT ON INDEX gateway_rate_limit_reservations_open_task_idx IS
    'Every open reservation (NULL task included), by task: recovery and finishing a task find a task''s open reservations; prune and recovery scan it whole for open reservations that outlived their window or attempt (live state, small).';
COMMENT ON INDEX gateway_rate_limit_reservations_task_idx IS
    'Serves the ON DELETE SET NULL of tasks (Prune''s task retention deletes finished tasks; the ledger rows stay, so counters keep matching them).';
COMMENT ON INDEX gateway_task_attempts_running_idx IS 'Serves recovery failing the running attempts of dead tasks.';
COMMENT ON INDEX gateway_task_events_pkey IS 'Event lookups by id (prune deletes by it).';
COMMENT ON INDEX gateway_tasks_runnable_idx IS 'Serves TaskClaimNext (FOR UPDATE SKIP LOCKED over due queued async tasks).';
