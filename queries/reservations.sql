-- Reservations: gateway_rate_limit_reservations, the ledger behind the
-- counters' reserved_value and used_value.

-- name: ReservationSettle :many
-- Commits or releases open reservations and moves their amounts in the
-- counters, in one statement: status 'committed' adds each actual amount to
-- used_value, 'released' adds nothing; both take the reserved amount out of
-- reserved_value. Idempotent: a reservation that is no longer 'reserved' is
-- left alone and reported with settled = false and its final status. An id
-- that matches no reservation comes back with a NULL status.
-- Run after CounterLockForReservations in the same transaction (lock order).
-- Locks: row locks on the settled reservations and on their counters
-- (already held).
-- Index: gateway_rate_limit_reservations_pkey; gateway_rate_limit_counters_pkey.
WITH input AS (
    SELECT unnest(@reservation_ids::uuid[])   AS id,
           unnest(@actual_amounts::numeric[]) AS actual_amount
),
settled AS (
    UPDATE gateway_rate_limit_reservations AS r
    SET status = @status::text,
        reason = sqlc.narg('reason')::text,
        actual_amount = CASE WHEN @status::text = 'committed' THEN input.actual_amount END,
        finalized_at = now(),
        updated_at = now()
    FROM input
    WHERE r.id = input.id
      AND r.status = 'reserved'
    RETURNING r.id, r.scope_type, r.scope_key, r.metric, r.window_seconds, r.window_start,
              r.reserved_amount, r.actual_amount
),
totals AS (
    SELECT scope_type, scope_key, metric, window_seconds, window_start,
           sum(reserved_amount)             AS released,
           coalesce(sum(actual_amount), 0)  AS used
    FROM settled
    GROUP BY scope_type, scope_key, metric, window_seconds, window_start
),
moved AS (
    UPDATE gateway_rate_limit_counters AS c
    SET reserved_value = c.reserved_value - totals.released,
        used_value = c.used_value + totals.used,
        updated_at = now()
    FROM totals
    WHERE c.scope_type = totals.scope_type
      AND c.scope_key = totals.scope_key
      AND c.metric = totals.metric
      AND c.window_seconds = totals.window_seconds
      AND c.window_start = totals.window_start
    RETURNING c.scope_type
)
SELECT input.id::uuid                                            AS id,
       (settled.id IS NOT NULL)::boolean                         AS settled,
       coalesce(CASE WHEN settled.id IS NOT NULL THEN @status::text END, prior.status)::text AS status,
       prior.metric                                              AS metric,
       prior.reserved_amount                                     AS reserved_amount,
       coalesce(settled.actual_amount, prior.actual_amount)      AS actual_amount
FROM input
LEFT JOIN settled ON settled.id = input.id
LEFT JOIN gateway_rate_limit_reservations AS prior ON prior.id = input.id;
