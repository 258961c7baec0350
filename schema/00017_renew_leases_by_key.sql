-- Lease renewal updates each lease by its primary key, not its tuple id.
--
-- pgadmit_renew_leases (00014) probed each lease by its primary key and
-- updated it by tuple id. A renewal holds the scope locks of its leases,
-- but Attach, which links a lease to an attempt, takes none: an Attach in
-- flight when the renewal took its snapshot, committed while the renewal
-- waited for the row, left a newer version whose tuple id is not the one
-- probed. PostgreSQL's EvalPlanQual re-check of the tuple-id qual then
-- failed on it, and the live lease was reported lost (*LeaseLostError),
-- not renewed. Now each lease is updated by its primary key, one statement
-- per lease in the order given (the caller's id order, the lock order), as
-- pgadmit_settle releases leases since 00016; liveness is still tested on
-- the newest version. One statement joining the ids to the table by key
-- could not keep both the order and the probes: a plan made when the table
-- looked small (a vacuum at a quiet moment) walked the whole primary key,
-- and one given the ids as an index condition locked the rows in the
-- order of the heap. The settings of 00015 are kept (CREATE OR REPLACE
-- would drop them otherwise). Down restores the body of 00014 with those
-- settings.

-- +goose Up
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_renew_leases(
    p_lease_ids   uuid[],
    p_ttl_seconds integer[],
    p_now         timestamptz DEFAULT NULL
)
RETURNS TABLE (
    id         uuid,
    expires_at timestamptz  -- the new expiry
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
-- Pushes the expiry of each lease that is still live to now + its TTL
-- (p_now, else clock_timestamp(): not the transaction's start, so that a
-- renewal in a long transaction cannot revive a lease that expired
-- meanwhile), and returns those it renewed. Called after the scopes' locks
-- (LeaseLockScopes).
-- One update per lease, by its primary key, in the order of p_lease_ids
-- (the caller sorts them: several leases are locked in id order). By key,
-- not tuple id: an Attach (which holds no scope lock) may have changed the
-- lease after the statement's snapshot; the update moves to the version it
-- locked (EvalPlanQual) and tests liveness there (IS TRUE: no partial index
-- of live leases matches it), so a release that held the row wins.
-- Locks: row lock on each renewed lease, in the order given.
-- Index: gateway_concurrency_leases_pkey (one probe per lease).
DECLARE
    v_now     timestamptz := coalesce(p_now, clock_timestamp());
    v_id      uuid;
    v_ttl     integer;
    v_expires timestamptz;
BEGIN
    FOR v_id, v_ttl IN
        SELECT u.id, u.ttl FROM unnest(p_lease_ids, p_ttl_seconds) WITH ORDINALITY AS u(id, ttl, i) ORDER BY u.i
    LOOP
        UPDATE gateway_concurrency_leases AS l
        SET expires_at = v_now + make_interval(secs => v_ttl)
        WHERE l.id = v_id
          AND (l.released_at IS NULL AND l.expires_at > v_now) IS TRUE
        RETURNING l.expires_at INTO v_expires;
        IF FOUND THEN
            id := v_id;
            expires_at := v_expires;
            RETURN NEXT;
        END IF;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_renew_leases(
    p_lease_ids   uuid[],
    p_ttl_seconds integer[],
    p_now         timestamptz DEFAULT NULL
)
RETURNS TABLE (
    id         uuid,
    expires_at timestamptz  -- the new expiry
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
-- Pushes the expiry of each lease that is still live to now + its TTL
-- (p_now, else clock_timestamp(): not the transaction's start, so that a
-- renewal in a long transaction cannot revive a lease that expired
-- meanwhile), and returns those it renewed. Called after the scopes' locks
-- (LeaseLockScopes).
-- Each lease is found by its primary key alone (LATERAL ... LIMIT 1), then
-- tested, then updated by tuple id: a liveness test in the lookup would let
-- a plan read every live lease through the partial index of live ones
-- instead, as the statement this replaces did.
-- Liveness is tested again on the row updated (IS TRUE: no partial index
-- of live leases matches it), which PostgreSQL re-evaluates on its newest
-- version when a release held the row (see the head of migration 00014).
-- Locks: row lock on each renewed lease.
-- Index: gateway_concurrency_leases_pkey (one probe per lease).
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    RETURN QUERY
    UPDATE gateway_concurrency_leases AS l
    SET expires_at = v_now + make_interval(secs => k.ttl)
    FROM (
        SELECT x.tid, u.ttl
        FROM unnest(p_lease_ids, p_ttl_seconds) AS u(id, ttl)
        CROSS JOIN LATERAL (
            SELECT y.ctid AS tid, y.released_at, y.expires_at
            FROM gateway_concurrency_leases AS y
            WHERE y.id = u.id
            LIMIT 1
        ) AS x
        WHERE x.released_at IS NULL AND x.expires_at > v_now
    ) AS k
    WHERE l.ctid = k.tid
      AND (l.released_at IS NULL AND l.expires_at > v_now) IS TRUE
    RETURNING l.id, l.expires_at;
END;
$$;
-- +goose StatementEnd
