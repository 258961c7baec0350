-- name: MaintenanceLeaseTake :one
-- Takes the lease of job @name for @holder until now + @ttl_seconds, when
-- nobody holds it or its holder's lease expired (or @holder holds it
-- already: then it is extended). acquired tells whether it was taken;
-- holder and expires_at are the lease's after the statement (the other
-- holder's when it was not taken; empty and now when the row was inserted by
-- a transaction that committed after this statement began).
-- The lease runs from the clock this statement reads after its locks
-- (greatest(now(), clock_timestamp()), as a concurrency lease's does since
-- schema/00018_lease_clock_after_locks.sql), not from now(), the
-- statement's start: a take that waited for the lease row (another
-- transaction held it locked) or for the table (a migration) longer than
-- the TTL, which its lock timeout allows (up to 4 s, the TTL 1 s at least),
-- wrote a lease expired already, and another process took the job over at
-- once while this one ran it. The VALUES are computed before any wait for
-- the row, so ON CONFLICT reads the clock again once it holds the row: it
-- is what decides whether the holder's lease expired, and when the new one
-- does. (A take that waits for another transaction's uncommitted insert of
-- the row, and inserts it once that rolls back, keeps the clock of its
-- VALUES: no statement of pgadmit's holds such an insert open.)
-- Locks: the lease row (insert, or FOR UPDATE through ON CONFLICT); waits
-- only for a concurrent take of the same job.
-- Index: gateway_maintenance_leases_pkey.
WITH taken AS (
    INSERT INTO gateway_maintenance_leases AS l (name, holder, acquired_at, expires_at)
    VALUES (@name::text, @holder::text, coalesce(sqlc.narg('now')::timestamptz, greatest(now(), clock_timestamp())),
            coalesce(sqlc.narg('now')::timestamptz, greatest(now(), clock_timestamp()))
            + make_interval(secs => @ttl_seconds::float8))
    ON CONFLICT (name) DO UPDATE
    SET holder = excluded.holder,
        acquired_at = CASE WHEN l.holder = excluded.holder THEN l.acquired_at
                           ELSE coalesce(sqlc.narg('now')::timestamptz, greatest(now(), clock_timestamp())) END,
        expires_at = coalesce(sqlc.narg('now')::timestamptz, greatest(now(), clock_timestamp()))
                     + make_interval(secs => @ttl_seconds::float8)
    WHERE l.expires_at <= coalesce(sqlc.narg('now')::timestamptz, greatest(now(), clock_timestamp()))
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
-- The lease runs from the clock this statement reads (as the take's does),
-- not from now(), the statement's start: a renewal that waited for the
-- table (a migration) longer than the TTL extended the lease to a time
-- already past, and the run went on under a lease another process could
-- take over at once. The clock is read before the UPDATE waits for the row
-- itself, which only a take of the same job holds, for a few milliseconds
-- (a take that updated it made this renewal find another holder).
-- Locks: the lease row (UPDATE).
-- Index: gateway_maintenance_leases_pkey.
UPDATE gateway_maintenance_leases AS l
SET expires_at = coalesce(sqlc.narg('now')::timestamptz, greatest(now(), clock_timestamp()))
                 + make_interval(secs => @ttl_seconds::float8)
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

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Maintenance leases and cursors: gateway_maintenance_leases,
-- gateway_maintenance_cursors.
--
-- Single flight of Recover and Prune without session state: a job runs
-- while its process holds the job's lease row, taken, renewed and given up
-- in one short statement each, so that it works the same through a
-- transaction-pooling proxy. A holder that dies stops renewing; its lease
-- lapses at expires_at and the next process takes the job over. Each
-- statement takes an optional @now (NULL: the database's clock: now(), or
-- for a lease's times the clock read after the statement's locks), so tests
-- drive time instead of sleeping.
--
-- Each table holds a row per job or walk, a handful: the primary keys named
-- above are what a statement probes, but once the tables are analyzed the
-- planner reads those few rows whole instead (a sequential scan of one
-- page), which is as cheap; neither table grows.
