-- name: CounterCheckWindows :many
-- Non-consuming preflight: whether each amount fits the current window of its
-- limit (decided in numeric, exactly as pgadmit_reserve decides), with the
-- window's usage and bounds and the database's now() so the caller computes
-- retry-after on the database clock; in input order. A window without a row
-- is empty. The current window is the one of @now (NULL: the database's
-- now()).
-- Locks: none (plain MVCC read).
-- Index: gateway_rate_limit_counters_pkey (one probe per limit).
SELECT w.ord::integer                                       AS ord,
       (coalesce(c.used_value, 0) + coalesce(c.reserved_value, 0) + w.amount <= w.limit_value)::boolean AS fits,
       coalesce(c.used_value, 0)::numeric                   AS used_value,
       coalesce(c.reserved_value, 0)::numeric               AS reserved_value,
       b.window_start::timestamptz                          AS window_start,
       (b.window_start + pg_catalog.make_interval(secs => w.window_seconds))::timestamptz AS reset_at,
       coalesce(sqlc.narg('now')::timestamptz, now())::timestamptz AS db_now
FROM (
    SELECT pg_catalog.generate_subscripts(@scope_types::text[], 1) AS ord,
           pg_catalog.unnest(@scope_types::text[])       AS scope_type,
           pg_catalog.unnest(@scope_keys::text[])        AS scope_key,
           pg_catalog.unnest(@metrics::text[])           AS metric,
           pg_catalog.unnest(@window_seconds::integer[]) AS window_seconds,
           pg_catalog.unnest(@limit_values::numeric[])   AS limit_value,
           pg_catalog.unnest(@amounts::numeric[])        AS amount
) AS w
CROSS JOIN LATERAL (
    SELECT date_bin(pg_catalog.make_interval(secs => w.window_seconds), coalesce(sqlc.narg('now')::timestamptz, now()), timestamptz 'epoch') AS window_start
) AS b
LEFT JOIN LATERAL (
    SELECT counter.used_value, counter.reserved_value
    FROM gateway_rate_limit_counters AS counter
    WHERE counter.scope_type = w.scope_type
      AND counter.scope_key = w.scope_key
      AND counter.metric = w.metric
      AND counter.window_seconds = w.window_seconds
      AND counter.window_start = b.window_start
    LIMIT 1 -- one row (primary key); also keeps the probe from being flattened into a hash join
) AS c ON true
ORDER BY w.ord;

-- name: CounterLockForReservations :exec
-- Row-locks, in the lock order (the primary key's columns, text in byte
-- order: COLLATE "C", as the admission functions sort them, whatever the
-- database's collation), the counters that the given open reservations draw
-- on, before a statement that updates other rows first (a task row) and
-- then settles them with AdmissionSettle.
-- Locks: FOR UPDATE on each counter row, sorted; reservations are only read.
-- Index: gateway_rate_limit_reservations_pkey to find the reservations,
-- gateway_rate_limit_counters_pkey to find the counters. The status test is
-- written `(...) IS TRUE` so that the planner cannot match it to the partial
-- indexes of open reservations (WHERE status = 'reserved'): a VACUUM run
-- while nothing was open records them as empty, and a plan made on that
-- would read every open reservation through one of them instead of probing
-- the primary key (TestHotPathsReadOnlyTheirRowsAfterAQuietVacuum).
SELECT c.scope_type
FROM gateway_rate_limit_counters AS c
WHERE (c.scope_type, c.scope_key, c.metric, c.window_seconds, c.window_start) IN (
    SELECT r.scope_type, r.scope_key, r.metric, r.window_seconds, r.window_start
    FROM gateway_rate_limit_reservations AS r
    WHERE r.id = ANY(@reservation_ids::uuid[])
      AND (r.status = 'reserved') IS TRUE
)
ORDER BY c.scope_type COLLATE "C", c.scope_key COLLATE "C", c.metric COLLATE "C", c.window_seconds, c.window_start
FOR UPDATE OF c;

-- name: CounterFindHeldForReservations :many
-- Of the given open reservations, those whose counter another transaction
-- holds locked right now, so that a settlement would wait for it: after a
-- maintenance batch gave up waiting (lock_timeout), it is retried without
-- them instead of being left whole. A snapshot: a lock taken or given up
-- right after is not seen.
-- Locks: FOR UPDATE on each counter it can lock at once (SKIP LOCKED: it
-- never waits, so it cannot break the lock order), held until the
-- statement's transaction ends; the mode in which the settlement locks its
-- counters first (CounterLockForReservations, pgadmit_lock_counters), so
-- that a counter is held here exactly when the settlement would wait for
-- it, by a FOR KEY SHARE holder (a foreign key's check) too.
-- Index: gateway_rate_limit_reservations_pkey; gateway_rate_limit_counters_pkey
-- (one probe per reservation: a locking subquery is not flattened into a
-- join). The status test is written `(...) IS TRUE` as in
-- CounterLockForReservations.
SELECT r.id
FROM gateway_rate_limit_reservations AS r
WHERE r.id = ANY(@reservation_ids::uuid[])
  AND (r.status = 'reserved') IS TRUE
  AND NOT EXISTS (
      SELECT 1
      FROM gateway_rate_limit_counters AS c
      WHERE c.scope_type = r.scope_type
        AND c.scope_key = r.scope_key
        AND c.metric = r.metric
        AND c.window_seconds = r.window_seconds
        AND c.window_start = r.window_start
      FOR UPDATE OF c SKIP LOCKED
  );

-- name: CounterTotalsByKeyPrefix :many
-- What the counters of the scopes of one type whose keys begin with
-- @key_prefix hold together, per metric, summed over all their windows:
-- `pgadmit bench` reads it after each workload and checks the usage gained
-- since its last read against what the workers committed.
-- Locks: none (MVCC read).
-- Index: none: a sequential scan of every counter (a key prefix cannot use
-- the primary key under the database's collation); a check after a
-- benchmark, not a path any request takes.
SELECT c.metric,
       sum(c.used_value)::numeric     AS used_value,
       sum(c.reserved_value)::numeric AS reserved_value
FROM gateway_rate_limit_counters AS c
WHERE c.scope_type = @scope_type::text
  AND starts_with(c.scope_key, @key_prefix::text)
GROUP BY c.metric
ORDER BY c.metric;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Window counters: gateway_rate_limit_counters.
--
-- Every window limit of an admission lives in one counter row keyed by
-- (scope_type, scope_key, metric, window_seconds, window_start). Windows are
-- fixed and aligned to the Unix epoch; their bounds are always computed from
-- the database's clock (now()), never the caller's.
--
-- Lock order, followed by every statement that locks counter rows, so that
-- no two transactions can deadlock on them: counter rows first, sorted by
-- their primary key's columns in byte order (COLLATE "C", whatever the
-- database's collation); then (admission only) concurrency advisory locks,
-- sorted by lock key; rows of other tables after that.
