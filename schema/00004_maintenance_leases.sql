-- Maintenance without session state.
--
-- Recover and Prune used to keep one process at a time behind a session
-- advisory lock. Behind a transaction-pooling proxy (PgBouncer with
-- pool_mode = transaction) a session belongs to whichever client last ran a
-- transaction on it: the lock was taken on one server connection, "released"
-- on another, and stayed held until the proxy recycled the first, so every
-- later pass was skipped. A lease row replaces it (River's leader table is
-- the model): taken, renewed and given up in short transactions of their
-- own, it lapses by itself at expires_at when its holder dies.
--
-- Prune also remembers how far its walk over finished tasks got, so each
-- run does new work only.
--
-- Every transactional migration from this one on starts with SET LOCAL
-- lock_timeout: an ALTER that queues behind a long transaction would stall
-- every admission queued behind it; failing fast leaves nothing applied and
-- the migration can simply be run again.

-- +goose Up
SET LOCAL lock_timeout = '5s';

CREATE TABLE gateway_maintenance_leases (
    name        text        PRIMARY KEY,
    holder      text        NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
COMMENT ON TABLE gateway_maintenance_leases IS
    'Single flight of maintenance jobs (recover, prune) across processes: one row per job while some process runs it. Taken with an upsert that succeeds only when the row is missing or expired, renewed while the job runs, deleted when it ends; a crashed holder''s lease lapses at expires_at.';
COMMENT ON COLUMN gateway_maintenance_leases.name IS 'The job: recover or prune.';
COMMENT ON COLUMN gateway_maintenance_leases.holder IS 'Who runs it: host, process id and a random suffix, one per run.';
COMMENT ON COLUMN gateway_maintenance_leases.acquired_at IS 'When the holder took the lease.';
COMMENT ON COLUMN gateway_maintenance_leases.expires_at IS 'Past this instant another process may take the job over.';
COMMENT ON INDEX gateway_maintenance_leases_pkey IS 'One lease per job: take, renew and release find it by name.';

CREATE TABLE gateway_maintenance_cursors (
    name        text        PRIMARY KEY,
    position_at timestamptz NOT NULL,
    position_id uuid        NOT NULL,
    updated_at  timestamptz NOT NULL
);
COMMENT ON TABLE gateway_maintenance_cursors IS
    'Keyset positions of maintenance walks that must not start over each run: one row per walk, the (timestamp, id) of the last row it finished.';
COMMENT ON COLUMN gateway_maintenance_cursors.name IS 'The walk: prune/events (finished tasks whose events were deleted).';
COMMENT ON COLUMN gateway_maintenance_cursors.position_at IS 'Timestamp part of the last position (a task''s finished_at).';
COMMENT ON COLUMN gateway_maintenance_cursors.position_id IS 'Id part of the last position, breaking ties of position_at.';
COMMENT ON COLUMN gateway_maintenance_cursors.updated_at IS 'When the walk last moved.';
COMMENT ON INDEX gateway_maintenance_cursors_pkey IS 'One position per walk, read and written by name.';

-- +goose Down
SET LOCAL lock_timeout = '5s';

DROP TABLE gateway_maintenance_cursors;
DROP TABLE gateway_maintenance_leases;
