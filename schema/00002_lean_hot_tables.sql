-- Lean hot tables: what every admission writes costs as little as it can.
--
-- Measured on PostgreSQL 15 (see README, "Performance"): each statement that
-- writes a row compiles every CHECK constraint of its table from its stored
-- text, then evaluates it, and writes an entry into every index whose
-- predicate the new row version satisfies. On the counter, reservation and
-- lease tables, which every admission writes two to four times, the CHECK
-- constraints of 00001 cost more than the updates themselves (an UPDATE of a
-- counter row took 70 us with its eight checks, 25 us with one), and an
-- UPDATE that changes a column named by any index (status, released_at,
-- finalized_at) writes every index again. So on these three tables:
--
-- * one cheap CHECK each, on what a bookkeeping bug would break (amounts,
--   status). The identity columns (scope, metric, window) are written once,
--   by pgadmit_reserve, from input the library validated; how a
--   reservation's status, finalized_at and actual_amount move together is
--   kept by pgadmit_settle, their one writer, and checked by the doctor (a
--   CASE expression over them cost 25 us per statement);
-- * only the indexes that admission, settlement, recovery and prune read,
--   and no index on when a row was finalized: a settled reservation is
--   found by its window, a released lease by its expiry;
-- * ledger ids that are time-ordered (UUID version 7), so that inserts
--   append to the primary key instead of dirtying a random page of it;
-- * counters with room on each page for the next version of their rows
--   (fillfactor), so that their updates are HOT: no index writes at all.

-- +goose Up

-- +goose StatementBegin
CREATE FUNCTION pgadmit_uuidv7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    -- 48 bits of Unix milliseconds, then the version, variant and random
    -- bits of a random UUID (version bits 0100 become 0111).
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION pgadmit_uuidv7() IS
    'Time-ordered (version 7) UUID for ledger rows: inserts append to the primary key instead of scattering over it.';

-- Counters: updated on every admission and settlement, never on an indexed column.
ALTER TABLE gateway_rate_limit_counters
    DROP CONSTRAINT gateway_rate_limit_counters_check,
    DROP CONSTRAINT gateway_rate_limit_counters_limit_value_check,
    DROP CONSTRAINT gateway_rate_limit_counters_metric_check,
    DROP CONSTRAINT gateway_rate_limit_counters_reserved_value_check,
    DROP CONSTRAINT gateway_rate_limit_counters_scope_key_check,
    DROP CONSTRAINT gateway_rate_limit_counters_scope_type_check,
    DROP CONSTRAINT gateway_rate_limit_counters_used_value_check,
    DROP CONSTRAINT gateway_rate_limit_counters_window_seconds_check,
    ADD CONSTRAINT gateway_rate_limit_counters_amounts_check CHECK (used_value >= 0 AND reserved_value >= 0);
ALTER TABLE gateway_rate_limit_counters SET (fillfactor = 50);
COMMENT ON CONSTRAINT gateway_rate_limit_counters_amounts_check ON gateway_rate_limit_counters IS
    'Usage never goes negative: a settlement that took out more than was put in fails loudly instead of being clamped.';

-- Reservations: inserted by admission, updated once by settlement.
ALTER TABLE gateway_rate_limit_reservations
    DROP CONSTRAINT gateway_rate_limit_reservations_actual_amount_check,
    DROP CONSTRAINT gateway_rate_limit_reservations_check,
    DROP CONSTRAINT gateway_rate_limit_reservations_check1,
    DROP CONSTRAINT gateway_rate_limit_reservations_limit_value_check,
    DROP CONSTRAINT gateway_rate_limit_reservations_reserved_amount_check,
    DROP CONSTRAINT gateway_rate_limit_reservations_status_check,
    ADD CONSTRAINT gateway_rate_limit_reservations_amounts_check CHECK (
        status IN ('reserved', 'committed', 'released') AND reserved_amount > 0 AND actual_amount >= 0
    );
ALTER TABLE gateway_rate_limit_reservations ALTER COLUMN id SET DEFAULT pgadmit_uuidv7();
COMMENT ON CONSTRAINT gateway_rate_limit_reservations_amounts_check ON gateway_rate_limit_reservations IS
    'A known status, a positive reserved amount, a non-negative actual amount. How status, finalized_at and actual_amount move together is kept by pgadmit_settle, their one writer, and checked by the doctor.';
DROP INDEX gateway_rate_limit_reservations_open_counter_idx;
DROP INDEX gateway_rate_limit_reservations_open_window_idx;
DROP INDEX gateway_rate_limit_reservations_finalized_idx;
CREATE INDEX gateway_rate_limit_reservations_window_idx ON gateway_rate_limit_reservations (window_start, id);
COMMENT ON INDEX gateway_rate_limit_reservations_window_idx IS
    'Serves prune: the reservations of windows that began before a cutoff, in keyset pages; window starts only grow, so inserts append.';
COMMENT ON INDEX gateway_rate_limit_reservations_open_task_idx IS
    'Every open reservation (NULL task included), by task: recovery and finishing a task find a task''s open reservations; prune and recovery scan it whole for open reservations that outlived their window or attempt (live state, small).';

-- Leases: inserted by admission, updated once when released.
ALTER TABLE gateway_concurrency_leases
    DROP CONSTRAINT gateway_concurrency_leases_limit_value_check,
    DROP CONSTRAINT gateway_concurrency_leases_scope_key_check,
    DROP CONSTRAINT gateway_concurrency_leases_scope_type_check;
ALTER TABLE gateway_concurrency_leases ALTER COLUMN id SET DEFAULT pgadmit_uuidv7();
DROP INDEX gateway_concurrency_leases_live_expiry_idx;
COMMENT ON INDEX gateway_concurrency_leases_live_task_idx IS
    'Every unreleased lease (NULL task included), by task: releasing a task''s leases; recovery scans it whole for expired leases (live state, small).';

-- +goose Down

COMMENT ON INDEX gateway_concurrency_leases_live_task_idx IS 'Serves releasing the leases of a finished or requeued task.';
CREATE INDEX gateway_concurrency_leases_live_expiry_idx ON gateway_concurrency_leases (expires_at)
    WHERE released_at IS NULL;
COMMENT ON INDEX gateway_concurrency_leases_live_expiry_idx IS 'Serves recovery releasing expired leases.';
ALTER TABLE gateway_concurrency_leases ALTER COLUMN id SET DEFAULT gen_random_uuid();
ALTER TABLE gateway_concurrency_leases
    ADD CONSTRAINT gateway_concurrency_leases_limit_value_check CHECK (limit_value >= 0),
    ADD CONSTRAINT gateway_concurrency_leases_scope_key_check CHECK (scope_key <> ''),
    ADD CONSTRAINT gateway_concurrency_leases_scope_type_check CHECK (scope_type <> '');

COMMENT ON INDEX gateway_rate_limit_reservations_open_task_idx IS 'Serves recovery releasing open reservations of dead or finished tasks.';
-- IF EXISTS: an interrupted 00010 Up (not transactional) may have dropped it.
DROP INDEX IF EXISTS gateway_rate_limit_reservations_window_idx;
CREATE INDEX gateway_rate_limit_reservations_finalized_idx ON gateway_rate_limit_reservations (finalized_at, id)
    WHERE status <> 'reserved';
COMMENT ON INDEX gateway_rate_limit_reservations_finalized_idx IS
    'Serves prune of finished reservations: keyset pages in (finalized_at, id) order, each read straight from the index without a sort.';
CREATE INDEX gateway_rate_limit_reservations_open_window_idx ON gateway_rate_limit_reservations (window_start)
    WHERE status = 'reserved';
COMMENT ON INDEX gateway_rate_limit_reservations_open_window_idx IS 'Serves prune releasing open reservations whose window ended long ago (a caller that never settled).';
CREATE INDEX gateway_rate_limit_reservations_open_counter_idx ON gateway_rate_limit_reservations
    (scope_type, scope_key, metric, window_seconds, window_start) WHERE status = 'reserved';
COMMENT ON INDEX gateway_rate_limit_reservations_open_counter_idx IS 'Serves the doctor''s per-counter sums of open reservations.';
ALTER TABLE gateway_rate_limit_reservations ALTER COLUMN id SET DEFAULT gen_random_uuid();
ALTER TABLE gateway_rate_limit_reservations
    DROP CONSTRAINT gateway_rate_limit_reservations_amounts_check,
    ADD CONSTRAINT gateway_rate_limit_reservations_actual_amount_check CHECK (actual_amount >= 0),
    ADD CONSTRAINT gateway_rate_limit_reservations_check CHECK ((status = 'reserved') = (finalized_at IS NULL)),
    ADD CONSTRAINT gateway_rate_limit_reservations_check1 CHECK ((status = 'committed') = (actual_amount IS NOT NULL)),
    ADD CONSTRAINT gateway_rate_limit_reservations_limit_value_check CHECK (limit_value >= 0),
    ADD CONSTRAINT gateway_rate_limit_reservations_reserved_amount_check CHECK (reserved_amount > 0),
    ADD CONSTRAINT gateway_rate_limit_reservations_status_check CHECK (status IN ('reserved', 'committed', 'released'));

ALTER TABLE gateway_rate_limit_counters RESET (fillfactor);
ALTER TABLE gateway_rate_limit_counters
    DROP CONSTRAINT gateway_rate_limit_counters_amounts_check,
    ADD CONSTRAINT gateway_rate_limit_counters_check CHECK (reset_at = window_start + make_interval(secs => window_seconds)),
    ADD CONSTRAINT gateway_rate_limit_counters_limit_value_check CHECK (limit_value >= 0),
    ADD CONSTRAINT gateway_rate_limit_counters_metric_check CHECK (metric <> '' AND metric NOT IN ('concurrent', 'queue_size')),
    ADD CONSTRAINT gateway_rate_limit_counters_reserved_value_check CHECK (reserved_value >= 0),
    ADD CONSTRAINT gateway_rate_limit_counters_scope_key_check CHECK (scope_key <> ''),
    ADD CONSTRAINT gateway_rate_limit_counters_scope_type_check CHECK (scope_type <> ''),
    ADD CONSTRAINT gateway_rate_limit_counters_used_value_check CHECK (used_value >= 0),
    ADD CONSTRAINT gateway_rate_limit_counters_window_seconds_check CHECK (window_seconds > 0);

DROP FUNCTION pgadmit_uuidv7();
