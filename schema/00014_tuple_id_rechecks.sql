-- Robustness of the updates by tuple id; the hot-batch procedures of 00009
-- dropped; what gateway_rate_limit_counters.limit_value holds, said truly.
--
-- pgadmit_settle_one and pgadmit_renew_leases (00008) find a row by its
-- primary key in a subquery, test it there (status, liveness, its counter)
-- and update it by tuple id. settle_one takes the counter row lock in the
-- same statement (a CTE FOR UPDATE), so its snapshot predates that wait,
-- and renewal may meet a lease a release is updating: the row tested can
-- be an old version. They were right only through PostgreSQL's EvalPlanQual
-- re-check of the tuple-id qual on the newest version (added upstream by
-- "Add missing EPQ recheck for TID Scan"; minors before it did not, and
-- there a Commit racing Recover's release could settle a reservation
-- twice). Both now also make their tests on the row they update, which
-- EvalPlanQual re-evaluates on every minor, written as (...) IS TRUE so that
-- no partial index of open reservations or live leases matches them: the
-- plans stay one primary-key probe and one tuple-id scan. The other
-- updates by tuple id were checked and are left as they are: pgadmit_settle
-- (00003) tests each reservation and lease as its probe locked it (FOR
-- UPDATE returns the newest version), the counter update of
-- pgadmit_reserve (00011) runs after its upsert locked the rows, and the
-- block functions (00013) update by id.
-- (Note added later: that was wrong for pgadmit_settle's leases. A lease
-- that a renewal changed after the statement's snapshot is locked in a
-- version the snapshot does not see, and an update by tuple id missed it;
-- 00016 releases leases by primary key, and 00017 renews them so. Its
-- reservations are still updated by tuple id, rightly: whatever changes a
-- reservation holds its counter, which pgadmit_settle locks first.)
--
-- pgadmit_hot_reserve, pgadmit_hot_reserve_windows and pgadmit_hot_settle
-- are called by no pgadmit since the version of migration 00012, which
-- commits hot batches with pgadmit_hot_commit. Every instance must run
-- such a version before this migration is applied. Down recreates them as
-- 00009 defined them, with the comments 00012 gave them.

-- +goose Up
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_settle_one(
    p_reservation_id uuid,
    p_scope_type     text,
    p_scope_key      text,
    p_metric         text,
    p_window_seconds integer,
    p_window_start   timestamptz,
    p_status         text,
    p_actual_amount  numeric,
    p_reason         text,
    p_now            timestamptz DEFAULT NULL
)
RETURNS TABLE (
    settled         boolean,  -- this call committed or released it
    status          text,     -- its status after the call; NULL: no such reservation
    metric          text,
    reserved_amount numeric,
    actual_amount   numeric
)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
-- Settles one reservation whose counter the caller names (as its grant
-- says): p_status 'committed' with p_actual_amount, or 'released'; reason
-- p_reason. Idempotent: a reservation no longer open is reported with
-- settled = false and left alone, as is one that draws on another counter
-- than the one named (a grant that does not match the database).
-- Locks: the counter row FOR UPDATE, then the reservation row (the lock
-- order), in one statement; then updates the counter.
-- Index: gateway_rate_limit_counters_pkey; gateway_rate_limit_reservations_pkey
-- (then the reservation by tuple id; its tests are made again on the row
-- updated, see the head of migration 00014).
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    v_released numeric;
    v_used     numeric;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('committed', 'released') THEN
        RAISE EXCEPTION 'pgadmit_settle_one: status must be committed or released, not %', p_status
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    WITH counter AS (
        SELECT 1
        FROM gateway_rate_limit_counters AS c
        WHERE c.scope_type = p_scope_type AND c.scope_key = p_scope_key AND c.metric = p_metric
          AND c.window_seconds = p_window_seconds AND c.window_start = p_window_start
        FOR UPDATE
    )
    UPDATE gateway_rate_limit_reservations AS r
    SET status = p_status,
        reason = nullif(p_reason, ''),
        actual_amount = CASE WHEN p_status = 'committed' THEN p_actual_amount END,
        finalized_at = v_now,
        updated_at = v_now
    FROM counter, (
        -- The reservation by its primary key alone, then tested (LIMIT 1
        -- keeps the tests out of the lookup), then updated by tuple id: a
        -- status test in the lookup would let a plan read every open
        -- reservation through the partial index of open ones instead, once
        -- the statistics say that index is small (a VACUUM while nothing
        -- was open).
        SELECT y.ctid AS tid, y.status, y.scope_type, y.scope_key, y.metric, y.window_seconds, y.window_start
        FROM gateway_rate_limit_reservations AS y
        WHERE y.id = p_reservation_id
        LIMIT 1
    ) AS x
    WHERE r.ctid = x.tid AND x.status = 'reserved'
      AND x.scope_type = p_scope_type AND x.scope_key = p_scope_key AND x.metric = p_metric
      AND x.window_seconds = p_window_seconds AND x.window_start = p_window_start
      -- The same tests on the row updated, which PostgreSQL re-evaluates on
      -- its newest version when the statement waited for it (the counter
      -- lock above comes after the statement's snapshot). IS TRUE keeps
      -- them from matching the partial index of open reservations.
      AND (r.status = 'reserved'
           AND r.scope_type = p_scope_type AND r.scope_key = p_scope_key AND r.metric = p_metric
           AND r.window_seconds = p_window_seconds AND r.window_start = p_window_start) IS TRUE
    RETURNING r.status, r.metric, r.reserved_amount, r.actual_amount
    INTO status, metric, reserved_amount, actual_amount;
    settled := FOUND;
    IF settled THEN
        v_released := reserved_amount;
        v_used := coalesce(actual_amount, 0);
        UPDATE gateway_rate_limit_counters AS c
        SET reserved_value = c.reserved_value - v_released,
            used_value = c.used_value + v_used,
            updated_at = v_now
        WHERE c.scope_type = p_scope_type AND c.scope_key = p_scope_key AND c.metric = p_metric
          AND c.window_seconds = p_window_seconds AND c.window_start = p_window_start;
    ELSE
        SELECT r.status, r.metric, r.reserved_amount, r.actual_amount
        INTO status, metric, reserved_amount, actual_amount
        FROM gateway_rate_limit_reservations AS r
        WHERE r.id = p_reservation_id;
    END IF;
    RETURN NEXT;
END;
$$;
-- +goose StatementEnd

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
LANGUAGE plpgsql VOLATILE AS $$
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

DROP PROCEDURE pgadmit_hot_settle(uuid[], text[], text[], text[], integer[], timestamptz[], text[], numeric[], text[], uuid[], text[], timestamptz, boolean[], integer[], uuid[], boolean[], text[], text[], numeric[], numeric[]);
DROP PROCEDURE pgadmit_hot_reserve(uuid[], uuid[], integer[], text[], text[], text[], integer[], numeric[], numeric[], integer[], text[], text[], numeric[], numeric[], integer[], timestamptz, integer[], boolean[], integer[], boolean[], uuid[], numeric[], numeric[], timestamptz[], timestamptz[], timestamptz[], text[]);
DROP PROCEDURE pgadmit_hot_reserve_windows(text[], text[], text[], integer[], numeric[], numeric[], integer[], boolean[], integer[], boolean[], uuid[], numeric[], numeric[], timestamptz[], timestamptz[], timestamptz[], text[]);

COMMENT ON COLUMN gateway_rate_limit_counters.limit_value IS
    'Limit written by the last admission, or Local block grant or trim, in this window: an admission''s own limit; the smallest limit among the requests of a combined batch that takes them whole; the block''s limit for a block granted or trimmed. Informational: every admission brings its own limit.';

-- +goose Down
SET LOCAL lock_timeout = '5s';

COMMENT ON COLUMN gateway_rate_limit_counters.limit_value IS 'Limit of the last admission; informational, every admission brings its own limit.';

-- +goose StatementBegin
CREATE PROCEDURE pgadmit_hot_reserve_windows(
    p_scope_types    text[],
    p_scope_keys     text[],
    p_metrics        text[],
    p_window_seconds integer[],
    p_limits         numeric[],
    p_amounts        numeric[],
    INOUT admissions      integer[],
    INOUT is_leases       boolean[],
    INOUT ords            integer[],
    INOUT fits            boolean[],
    INOUT grant_ids       uuid[],
    INOUT current_values  numeric[],
    INOUT reserved_values numeric[],
    INOUT window_starts   timestamptz[],
    INOUT reset_ats       timestamptz[],
    INOUT db_nows         timestamptz[],
    INOUT refusals        text[]
)
LANGUAGE plpgsql AS $$
-- pgadmit_reserve_windows, its locks released before its commit's flush
-- and its rows returned after it (see the head of this migration).
-- Locks: those of pgadmit_reserve_windows, until its commit is written.
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT array_agg(r.admission), array_agg(r.is_lease), array_agg(r.ord), array_agg(r.fits),
           array_agg(r.grant_id), array_agg(r.current_value), array_agg(r.reserved_value),
           array_agg(r.window_start), array_agg(r.reset_at), array_agg(r.db_now), array_agg(r.refusal)
    INTO admissions, is_leases, ords, fits, grant_ids, current_values, reserved_values,
         window_starts, reset_ats, db_nows, refusals
    FROM pgadmit_reserve_windows(p_scope_types, p_scope_keys, p_metrics, p_window_seconds, p_limits, p_amounts) AS r;
    COMMIT;
    PERFORM pg_logical_emit_message(true, 'pgadmit', 'flush');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE PROCEDURE pgadmit_hot_reserve(
    p_task_ids         uuid[],
    p_attempt_ids      uuid[],
    p_w_admission      integer[],
    p_w_scope_types    text[],
    p_w_scope_keys     text[],
    p_w_metrics        text[],
    p_w_window_seconds integer[],
    p_w_limits         numeric[],
    p_w_amounts        numeric[],
    p_c_admission      integer[],
    p_c_scope_types    text[],
    p_c_scope_keys     text[],
    p_c_limits         numeric[],
    p_c_amounts        numeric[],
    p_c_ttl_seconds    integer[],
    p_now              timestamptz,
    INOUT admissions      integer[],
    INOUT is_leases       boolean[],
    INOUT ords            integer[],
    INOUT fits            boolean[],
    INOUT grant_ids       uuid[],
    INOUT current_values  numeric[],
    INOUT reserved_values numeric[],
    INOUT window_starts   timestamptz[],
    INOUT reset_ats       timestamptz[],
    INOUT db_nows         timestamptz[],
    INOUT refusals        text[]
)
LANGUAGE plpgsql AS $$
-- pgadmit_reserve, its locks released before its commit's flush and its
-- rows returned after it (see the head of this migration).
-- Locks: those of pgadmit_reserve, until its commit is written.
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT array_agg(r.admission), array_agg(r.is_lease), array_agg(r.ord), array_agg(r.fits),
           array_agg(r.grant_id), array_agg(r.current_value), array_agg(r.reserved_value),
           array_agg(r.window_start), array_agg(r.reset_at), array_agg(r.db_now), array_agg(r.refusal)
    INTO admissions, is_leases, ords, fits, grant_ids, current_values, reserved_values,
         window_starts, reset_ats, db_nows, refusals
    FROM pgadmit_reserve(p_task_ids, p_attempt_ids,
                         p_w_admission, p_w_scope_types, p_w_scope_keys, p_w_metrics,
                         p_w_window_seconds, p_w_limits, p_w_amounts,
                         p_c_admission, p_c_scope_types, p_c_scope_keys,
                         p_c_limits, p_c_amounts, p_c_ttl_seconds, p_now) AS r;
    COMMIT;
    PERFORM pg_logical_emit_message(true, 'pgadmit', 'flush');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE PROCEDURE pgadmit_hot_settle(
    p_reservation_ids uuid[],
    p_scope_types     text[],
    p_scope_keys      text[],
    p_metrics         text[],
    p_window_seconds  integer[],
    p_window_starts   timestamptz[],
    p_statuses        text[],
    p_actual_amounts  numeric[],
    p_reasons         text[],
    p_lease_ids       uuid[],
    p_lease_reasons   text[],
    p_now             timestamptz,
    INOUT is_leases        boolean[],
    INOUT ords             integer[],
    INOUT ids              uuid[],
    INOUT settled          boolean[],
    INOUT statuses         text[],     -- '' where pgadmit_settle says NULL (no such reservation)
    INOUT metrics          text[],
    INOUT reserved_amounts numeric[],
    INOUT actual_amounts   numeric[]
)
LANGUAGE plpgsql AS $$
-- pgadmit_settle, its locks released before its commit's flush and its
-- rows returned after it (see the head of this migration).
-- Locks: those of pgadmit_settle, until its commit is written.
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT array_agg(s.is_lease), array_agg(s.ord), array_agg(s.id), array_agg(s.settled),
           array_agg(coalesce(s.status, '')), array_agg(coalesce(s.metric, '')),
           array_agg(coalesce(s.reserved_amount, 0)), array_agg(coalesce(s.actual_amount, 0))
    INTO is_leases, ords, ids, settled, statuses, metrics, reserved_amounts, actual_amounts
    FROM pgadmit_settle(p_reservation_ids, p_scope_types, p_scope_keys, p_metrics,
                        p_window_seconds, p_window_starts, p_statuses, p_actual_amounts,
                        p_reasons, p_lease_ids, p_lease_reasons, p_now) AS s;
    COMMIT;
    PERFORM pg_logical_emit_message(true, 'pgadmit', 'flush');
END;
$$;
-- +goose StatementEnd

COMMENT ON PROCEDURE pgadmit_hot_reserve_windows(text[], text[], text[], integer[], numeric[], numeric[], integer[], boolean[], integer[], boolean[], uuid[], numeric[], numeric[], timestamptz[], timestamptz[], timestamptz[], text[]) IS
    'No longer called (since migration 00012: pgadmit_hot_commit); kept for instances of an earlier pgadmit during an upgrade.';
COMMENT ON PROCEDURE pgadmit_hot_reserve(uuid[], uuid[], integer[], text[], text[], text[], integer[], numeric[], numeric[], integer[], text[], text[], numeric[], numeric[], integer[], timestamptz, integer[], boolean[], integer[], boolean[], uuid[], numeric[], numeric[], timestamptz[], timestamptz[], timestamptz[], text[]) IS
    'No longer called (since migration 00012: pgadmit_hot_commit); kept for instances of an earlier pgadmit during an upgrade.';
COMMENT ON PROCEDURE pgadmit_hot_settle(uuid[], text[], text[], text[], integer[], timestamptz[], text[], numeric[], text[], uuid[], text[], timestamptz, boolean[], integer[], uuid[], boolean[], text[], text[], numeric[], numeric[]) IS
    'No longer called (since migration 00012: pgadmit_hot_commit); kept for instances of an earlier pgadmit during an upgrade.';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_settle_one(
    p_reservation_id uuid,
    p_scope_type     text,
    p_scope_key      text,
    p_metric         text,
    p_window_seconds integer,
    p_window_start   timestamptz,
    p_status         text,
    p_actual_amount  numeric,
    p_reason         text,
    p_now            timestamptz DEFAULT NULL
)
RETURNS TABLE (
    settled         boolean,  -- this call committed or released it
    status          text,     -- its status after the call; NULL: no such reservation
    metric          text,
    reserved_amount numeric,
    actual_amount   numeric
)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
-- Settles one reservation whose counter the caller names (as its grant
-- says): p_status 'committed' with p_actual_amount, or 'released'; reason
-- p_reason. Idempotent: a reservation no longer open is reported with
-- settled = false and left alone, as is one that draws on another counter
-- than the one named (a grant that does not match the database).
-- Locks: the counter row FOR UPDATE, then the reservation row (the lock
-- order), in one statement; then updates the counter.
-- Index: gateway_rate_limit_counters_pkey; gateway_rate_limit_reservations_pkey
-- (then the reservation by tuple id).
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    v_released numeric;
    v_used     numeric;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('committed', 'released') THEN
        RAISE EXCEPTION 'pgadmit_settle_one: status must be committed or released, not %', p_status
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    WITH counter AS (
        SELECT 1
        FROM gateway_rate_limit_counters AS c
        WHERE c.scope_type = p_scope_type AND c.scope_key = p_scope_key AND c.metric = p_metric
          AND c.window_seconds = p_window_seconds AND c.window_start = p_window_start
        FOR UPDATE
    )
    UPDATE gateway_rate_limit_reservations AS r
    SET status = p_status,
        reason = nullif(p_reason, ''),
        actual_amount = CASE WHEN p_status = 'committed' THEN p_actual_amount END,
        finalized_at = v_now,
        updated_at = v_now
    FROM counter, (
        -- The reservation by its primary key alone, then tested (LIMIT 1
        -- keeps the tests out of the lookup), then updated by tuple id: a
        -- status test in the lookup would let a plan read every open
        -- reservation through the partial index of open ones instead, once
        -- the statistics say that index is small (a VACUUM while nothing
        -- was open).
        SELECT y.ctid AS tid, y.status, y.scope_type, y.scope_key, y.metric, y.window_seconds, y.window_start
        FROM gateway_rate_limit_reservations AS y
        WHERE y.id = p_reservation_id
        LIMIT 1
    ) AS x
    WHERE r.ctid = x.tid AND x.status = 'reserved'
      AND x.scope_type = p_scope_type AND x.scope_key = p_scope_key AND x.metric = p_metric
      AND x.window_seconds = p_window_seconds AND x.window_start = p_window_start
    RETURNING r.status, r.metric, r.reserved_amount, r.actual_amount
    INTO status, metric, reserved_amount, actual_amount;
    settled := FOUND;
    IF settled THEN
        v_released := reserved_amount;
        v_used := coalesce(actual_amount, 0);
        UPDATE gateway_rate_limit_counters AS c
        SET reserved_value = c.reserved_value - v_released,
            used_value = c.used_value + v_used,
            updated_at = v_now
        WHERE c.scope_type = p_scope_type AND c.scope_key = p_scope_key AND c.metric = p_metric
          AND c.window_seconds = p_window_seconds AND c.window_start = p_window_start;
    ELSE
        SELECT r.status, r.metric, r.reserved_amount, r.actual_amount
        INTO status, metric, reserved_amount, actual_amount
        FROM gateway_rate_limit_reservations AS r
        WHERE r.id = p_reservation_id;
    END IF;
    RETURN NEXT;
END;
$$;
-- +goose StatementEnd

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
LANGUAGE plpgsql VOLATILE AS $$
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
    RETURNING l.id, l.expires_at;
END;
$$;
-- +goose StatementEnd
