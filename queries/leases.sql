-- name: LeaseLockScopes :exec
-- Serializes everything that changes whether a lease counts: one
-- transaction-scoped advisory lock per distinct (scope_type, scope_key),
-- taken in lock-key order (the lock order) after the counter rows. The
-- scopes are those given, plus those of the given leases (renewal). Held
-- until the transaction ends, so the next statement counts the live leases
-- of the scope exactly, and a renewal cannot revive a lease that an
-- admission has already counted as expired.
-- Locks: pg_advisory_xact_lock on hashtextextended of the scope; no row locks.
-- Index: gateway_concurrency_leases_pkey for the given leases.
SELECT pg_advisory_xact_lock(s.lock_key)
FROM (
    SELECT DISTINCT pg_catalog.hashtextextended(
               'pgadmit/concurrent/' || length(t.scope_type)::text || ':' || t.scope_type || '/' || t.scope_key,
               0
           ) AS lock_key
    FROM (
        SELECT pg_catalog.unnest(@scope_types::text[]) AS scope_type,
               pg_catalog.unnest(@scope_keys::text[])  AS scope_key
        UNION ALL
        SELECT lease.scope_type, lease.scope_key
        FROM gateway_concurrency_leases AS lease
        WHERE lease.id = ANY(@lease_ids::uuid[])
    ) AS t
    ORDER BY lock_key
) AS s
ORDER BY s.lock_key;

-- name: LeaseRenew :many
-- Heartbeat: pushes the expiry of each live lease to now + its TTL and
-- returns the leases it renewed; a lease missing from the result was lost
-- (released or expired) and must not be relied on. Runs after
-- LeaseLockScopes of the same leases; "now" is @now, else clock_timestamp()
-- (not the transaction's start, so a renewal in a long transaction cannot
-- revive a lease that expired meanwhile). The function (as
-- schema/00017_renew_leases_by_key.sql defined it; 00021 only made its calls
-- of PostgreSQL's functions exact) updates each lease by its primary key
-- alone, one statement per lease in the order given, its plans forced to
-- index probes (00015) even on a table never analysed.
-- Locks: row lock on each renewed lease.
-- Index: gateway_concurrency_leases_pkey.
SELECT r.id::uuid AS id, r.expires_at::timestamptz AS expires_at
FROM pgadmit_renew_leases(@lease_ids::uuid[], @ttl_seconds::integer[], sqlc.narg('now')::timestamptz) AS r;

-- name: LeaseCountByKeyPrefix :one
-- How many concurrency leases of the scopes of one type whose keys begin
-- with @key_prefix are unreleased, expired or not: `pgadmit bench` checks
-- that a workload left none.
-- Locks: none (MVCC read).
-- Index: gateway_concurrency_leases_live_scope_idx (partial: unreleased
-- leases, live state), its leading scope_type, the key prefix then
-- filtered.
SELECT count(*)::bigint AS leases
FROM gateway_concurrency_leases AS l
WHERE l.released_at IS NULL
  AND l.scope_type = @scope_type::text
  AND starts_with(l.scope_key, @key_prefix::text);

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Concurrency leases: gateway_concurrency_leases.
--
-- A "concurrent" limit holds a lease row per admitted request. A lease counts
-- while released_at IS NULL AND expires_at > now(), so a lease of a crashed
-- process stops counting by itself at its expiry.
