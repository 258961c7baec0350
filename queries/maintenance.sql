-- Maintenance leases and cursors: gateway_maintenance_leases,
-- gateway_maintenance_cursors.
--
-- Single flight of Recover and Prune without session state: a job runs
-- while its process holds the job's lease row, taken, renewed and given up
-- in one short statement each, so that it works the same through a
-- transaction-pooling proxy. A holder that dies stops renewing; its lease
-- lapses at expires_at and the next process takes the job over. Each
-- statement takes an optional @now (NULL: the database's now()), so tests
-- drive time instead of sleeping.
--
-- Each table holds a row per job or walk, a handful: the primary keys named
-- below are what a statement probes, but once the tables are analyzed the
-- planner reads those few rows whole instead (a sequential scan of one
-- page), which is as cheap; neither table grows.

-- name: MaintenanceLeaseTake :one
-- Takes the lease of job @name for @holder until now + @ttl_seconds, when
-- nobody holds it or its holder's lease expired (or @holder holds it
-- already: then it is extended). acquired tells whether it was taken;
-- holder and expires_at are the lease's after the statement (the other
-- holder's when it was not taken; empty and now when the row was inserted by
-- a transaction that committed after this statement began).
-- Locks: the lease row (insert, or FOR UPDATE through ON CONFLICT); waits
-- only for a concurrent take of the same job.
-- Index: gateway_maintenance_leases_pkey.
WITH taken AS (
    INSERT INTO gateway_maintenance_leases AS l (name, holder, acquired_at, expires_at)
    VALUES (@name::text, @holder::text, coalesce(sqlc.narg('now')::timestamptz, now()),
            coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @ttl_seconds::float8))
    ON CONFLICT (name) DO UPDATE
    SET holder = excluded.holder,
        acquired_at = CASE WHEN l.holder = excluded.holder THEN l.acquired_at ELSE excluded.acquired_at END,
        expires_at = excluded.expires_at
    WHERE l.expires_at <= excluded.acquired_at
       OR l.holder = excluded.holder
    RETURNING l.holder, l.expires_at
)
SELECT EXISTS (SELECT 1 FROM taken)::boolean AS acquired,
       coalesce((SELECT taken.holder FROM taken),
                (SELECT cur.holder FROM gateway_maintenance_leases AS cur WHERE cur.name = @name::text),
                '')::text AS holder,
       coalesce((SELECT taken.expires_at FROM taken),
                (SELECT cur.expires_at FROM gateway_maintenance_leases AS cur WHERE cur.name = @name::text),
                coalesce(sqlc.narg('now')::timestamptz, now()))::timestamptz AS expires_at;

-- name: MaintenanceLeaseRenew :one
-- Extends @holder's lease of job @name to now + @ttl_seconds. No row when
-- @holder no longer holds it (it expired and another process took it
-- over): the job must stop.
-- Locks: the lease row (UPDATE).
-- Index: gateway_maintenance_leases_pkey.
UPDATE gateway_maintenance_leases AS l
SET expires_at = coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @ttl_seconds::float8)
WHERE l.name = @name::text
  AND l.holder = @holder::text
RETURNING l.expires_at;

-- name: MaintenanceLeaseRelease :execrows
-- Gives up @holder's lease of job @name, so the next pass need not wait
-- for it to expire. 0 rows when @holder no longer held it.
-- Locks: the lease row (DELETE).
-- Index: gateway_maintenance_leases_pkey.
DELETE FROM gateway_maintenance_leases AS l
WHERE l.name = @name::text
  AND l.holder = @holder::text;

-- name: MaintenanceCursorGet :one
-- Where walk @name stopped last time: the (timestamp, id) of the last row
-- it finished, or the epoch and the nil UUID when it never ran.
-- Locks: none (MVCC read).
-- Index: gateway_maintenance_cursors_pkey.
SELECT coalesce((SELECT c.position_at FROM gateway_maintenance_cursors AS c WHERE c.name = @name::text),
                timestamptz 'epoch')::timestamptz AS position_at,
       coalesce((SELECT c.position_id FROM gateway_maintenance_cursors AS c WHERE c.name = @name::text),
                '00000000-0000-0000-0000-000000000000'::uuid)::uuid AS position_id;

-- name: MaintenanceCursorSet :exec
-- Records where walk @name stopped. A position is only ever moved forward,
-- so a slower concurrent run cannot move it back.
-- Locks: the cursor row (upsert).
-- Index: gateway_maintenance_cursors_pkey.
INSERT INTO gateway_maintenance_cursors AS c (name, position_at, position_id, updated_at)
VALUES (@name::text, @position_at::timestamptz, @position_id::uuid, coalesce(sqlc.narg('now')::timestamptz, now()))
ON CONFLICT (name) DO UPDATE
SET position_at = excluded.position_at,
    position_id = excluded.position_id,
    updated_at = excluded.updated_at
WHERE (c.position_at, c.position_id) < (excluded.position_at, excluded.position_id);
