-- name: AllotmentTake :one
-- Takes a block of the current window's units for @holder: @want units, or
-- what the window has free when less, never less than @need and never more
-- than half of what is free when @want is more than that; granted 0 when
-- @need does not fit. First trims the holder's block @trim_id (if any) to
-- @trim_to, what it admitted, giving the rest back.
-- Locks: the counter row FOR UPDATE (creating it if missing), then the block
-- rows.
-- Index: gateway_rate_limit_counters_pkey; gateway_rate_limit_allotments_pkey.
SELECT a.allotment_id::uuid         AS allotment_id,
       a.granted::text              AS granted,
       a.current_value::numeric     AS current_value,
       a.reserved_value::numeric    AS reserved_value,
       a.window_start::timestamptz  AS window_start,
       a.reset_at::timestamptz      AS reset_at,
       a.db_now::timestamptz        AS db_now
FROM pgadmit_allot(
         @holder::text, @scope_type::text, @scope_key::text, @metric::text, @window_seconds::integer,
         @limit_value::numeric, @want::numeric, @need::numeric,
         sqlc.narg('trim_id')::uuid, (sqlc.narg('trim_to')::text)::numeric, sqlc.narg('now')::timestamptz
     ) AS a;

-- name: AllotmentTrim :exec
-- Trims the holder's open block @trim_id to @trim_to (what it admitted),
-- giving the rest back to the window, and takes no new block (it asks
-- pgadmit_allot for nothing). For a block set aside while requests admitted
-- from it are still in flight; a block of an ended window is left alone.
-- Locks: the counter row FOR UPDATE, then the block row.
-- Index: gateway_rate_limit_counters_pkey; gateway_rate_limit_allotments_pkey.
SELECT a.reserved_value::numeric AS reserved_value
FROM pgadmit_allot(
         @holder::text, @scope_type::text, @scope_key::text, @metric::text, @window_seconds::integer,
         @limit_value::numeric, 0::numeric, 0::numeric, @trim_id::uuid, (@trim_to::text)::numeric, sqlc.narg('now')::timestamptz
     ) AS a;

-- name: AllotmentReturn :many
-- Returns open blocks, each charging what its holder admitted from it
-- (@used) to its counter's used_value and giving its granted units back
-- (reason @reasons). Idempotent: returned is false for a block already
-- returned.
-- Locks: the counters FOR UPDATE in primary-key order, then the block rows.
-- Index: gateway_rate_limit_allotments_pkey; gateway_rate_limit_counters_pkey.
SELECT r.ord::integer      AS ord,
       r.returned::boolean AS returned,
       r.granted::numeric  AS granted,
       r.used::numeric     AS used
FROM pgadmit_allot_return(@ids::uuid[], (@used::text[])::numeric[], @reasons::text[], sqlc.narg('now')::timestamptz) AS r;

-- name: AllotmentSync :one
-- Records what the holder has admitted so far from each of its open blocks,
-- so that a DBA (and recovery, should the holder die) sees it, and returns
-- how many it recorded and the database's clock (now(), read when the
-- statement starts), by which the holder keeps its estimate of that clock
-- current between blocks.
-- Locks: row locks on the open blocks named; no counter rows.
-- Index: gateway_rate_limit_allotments_pkey. The open test is written
-- `(...) IS TRUE` so that the planner cannot match it to the partial index
-- of open blocks: a VACUUM run while none was open records it as empty, and
-- a plan made on that read every holder's open blocks through it
-- (TestAllotmentStatementsProbeTheirBlocksAfterAQuietVacuum).
WITH synced AS (
    UPDATE gateway_rate_limit_allotments AS a
    SET consumed = greatest(u.consumed, 0),
        synced_at = now()
    FROM (
        SELECT pg_catalog.unnest(@ids::uuid[])                   AS id,
               pg_catalog.unnest((@consumed::text[])::numeric[]) AS consumed
    ) AS u
    WHERE a.id = u.id
      AND (a.returned_at IS NULL) IS TRUE
    RETURNING 1
)
SELECT (SELECT count(*) FROM synced)::bigint AS synced,
       now()::timestamptz                  AS db_now;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Allotments: gateway_rate_limit_allotments, blocks of a window's units that
-- a process admits from in its own memory (Limit.Local). The functions they
-- call were created by schema/00006_allotments.sql; their definitions in
-- force are 00021's, which only made their calls of PostgreSQL's functions
-- exact in the bodies of 00013 (pgadmit_allot) and 00019
-- (pgadmit_allot_return).
