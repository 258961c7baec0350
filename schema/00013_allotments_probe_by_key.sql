-- The block functions of Local limits probe a block by its key alone.
--
-- pgadmit_allot (trimming the holder's previous block as it takes the next)
-- and pgadmit_allot_return tested a block's id and `returned_at IS NULL` side
-- by side. That test is the predicate of the partial index of open blocks,
-- and when the last VACUUM ran while no block was open, the planner takes
-- that index for empty and reads it, filtering on the id, instead of
-- probing the primary key: with 300 holders each holding a block, a trim
-- read 300 index entries, and pgadmit_allot does it while it holds the
-- counter row; a return of one block read 600. The tests are now written
-- `(returned_at IS NULL) IS TRUE`, which no partial index matches, as
-- AllotmentSync's is (queries/allotments.sql). And the return's update,
-- which joined the blocks with the ids it was given, and which a plan
-- could turn around into a read of every block, also tests the blocks' id
-- against the array of ids, which bounds a scan of the blocks to those
-- named. (Not by tuple id, as migration 00008 updates: a block that a
-- holder's report changed while the return waited has a new tuple id, and
-- an update by the old one would skip it and leave it open.)
-- TestAllotmentStatementsProbeTheirBlocksAfterAQuietVacuum counts the index
-- entries each reads after such a VACUUM, and
-- TestAllotmentReturnWaitingForAReportReturnsTheBlock returns a block
-- while a report holds it. Nothing else changes; Down restores the bodies
-- of 00006.

-- +goose Up
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_allot(
    p_holder         text,
    p_scope_type     text,
    p_scope_key      text,
    p_metric         text,
    p_window_seconds integer,
    p_limit          numeric,
    p_want           numeric,
    p_need           numeric,
    p_trim_id        uuid,
    p_trim_to        numeric,
    p_now            timestamptz DEFAULT NULL
)
RETURNS TABLE (
    allotment_id   uuid,        -- the new block; NULL when none was granted
    granted        numeric,     -- its units (0 when none)
    current_value  numeric,     -- the window's used_value when decided
    reserved_value numeric,     -- the window's reserved_value when decided (after the trim, before the grant)
    window_start   timestamptz,
    reset_at       timestamptz,
    db_now         timestamptz
)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
-- Takes a block of the current window's units for p_holder: p_want units,
-- or what the window has free when that is less, but never less than p_need
-- (the request waiting for it) and never more than half of what is free
-- when others may need the rest: no block is granted when p_need does not
-- fit. First, when p_trim_id names an open block of the same holder and
-- counter, it shrinks that block to p_trim_to (what it admitted), giving the
-- rest back to the window, so the units it did not use count for this grant.
-- Locks: the counter row (FOR UPDATE, by the upsert that creates a missing
-- one), then the trimmed and the new block rows (the lock order).
-- Index: gateway_rate_limit_counters_pkey; gateway_rate_limit_allotments_pkey
-- (the open test is written IS TRUE, so that no plan reads the partial index
-- of open blocks instead: see the migration's header).
DECLARE
    v_now     timestamptz := coalesce(p_now, now());
    v_start   timestamptz := date_bin(make_interval(secs => p_window_seconds), v_now, timestamptz 'epoch');
    v_trimmed numeric := 0;
    v_free    numeric;
    v_grant   numeric;
BEGIN
    window_start := v_start;
    reset_at := v_start + make_interval(secs => p_window_seconds);
    db_now := v_now;
    -- Lock (or create, empty) the counter row.
    INSERT INTO gateway_rate_limit_counters AS c (
        scope_type, scope_key, metric, window_seconds, window_start, reset_at,
        limit_value, created_at, updated_at
    )
    VALUES (p_scope_type, p_scope_key, p_metric, p_window_seconds, v_start,
            v_start + make_interval(secs => p_window_seconds), p_limit, v_now, v_now)
    ON CONFLICT ON CONSTRAINT gateway_rate_limit_counters_pkey DO UPDATE
    SET limit_value = c.limit_value
    WHERE false;
    SELECT c.used_value, c.reserved_value INTO current_value, reserved_value
    FROM gateway_rate_limit_counters AS c
    WHERE c.scope_type = p_scope_type AND c.scope_key = p_scope_key AND c.metric = p_metric
      AND c.window_seconds = p_window_seconds AND c.window_start = v_start
    FOR UPDATE;

    IF p_trim_id IS NOT NULL THEN
        WITH old AS (
            SELECT x.granted AS before FROM gateway_rate_limit_allotments AS x WHERE x.id = p_trim_id FOR UPDATE
        )
        UPDATE gateway_rate_limit_allotments AS a
        SET granted = greatest(p_trim_to, 0)
        FROM old
        WHERE a.id = p_trim_id AND (a.returned_at IS NULL) IS TRUE AND a.holder = p_holder
          AND a.scope_type = p_scope_type AND a.scope_key = p_scope_key AND a.metric = p_metric
          AND a.window_seconds = p_window_seconds AND a.window_start = v_start
          AND a.granted > greatest(p_trim_to, 0)
        RETURNING old.before - a.granted INTO v_trimmed;
        v_trimmed := coalesce(v_trimmed, 0);
        reserved_value := reserved_value - v_trimmed;
    END IF;

    v_free := p_limit - current_value - reserved_value;
    v_grant := 0;
    IF p_need <= v_free THEN
        v_grant := least(p_want, greatest(p_need, trunc(v_free / 2, 6)));
        v_grant := greatest(v_grant, p_need);
    END IF;
    IF v_grant > 0 THEN
        INSERT INTO gateway_rate_limit_allotments AS a (
            holder, scope_type, scope_key, metric, window_seconds, window_start, expires_at,
            limit_value, granted, created_at, synced_at
        )
        VALUES (p_holder, p_scope_type, p_scope_key, p_metric, p_window_seconds, v_start,
                v_start + make_interval(secs => p_window_seconds), p_limit, v_grant, v_now, v_now)
        RETURNING a.id INTO allotment_id;
    END IF;
    granted := v_grant;
    IF v_grant > 0 OR v_trimmed > 0 THEN
        UPDATE gateway_rate_limit_counters AS c
        SET reserved_value = c.reserved_value - v_trimmed + v_grant,
            limit_value = p_limit,
            updated_at = v_now
        WHERE c.scope_type = p_scope_type AND c.scope_key = p_scope_key AND c.metric = p_metric
          AND c.window_seconds = p_window_seconds AND c.window_start = v_start;
    END IF;
    RETURN NEXT;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_allot_return(
    p_ids     uuid[],
    p_used    numeric[],
    p_reasons text[],
    p_now     timestamptz DEFAULT NULL
)
RETURNS TABLE (
    ord      integer,  -- 1-based index into p_ids
    returned boolean,  -- this call returned it (false: already returned, or no such block)
    granted  numeric,
    used     numeric
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
-- Returns open blocks: each leaves its counter's reserved_value (its
-- granted units) and adds what its holder admitted (p_used) to used_value;
-- the block row records when, how much and why. Idempotent: a block already
-- returned is left alone.
-- Locks: the blocks' counters FOR UPDATE in primary-key order (the lock
-- order), then the block rows.
-- Index: gateway_rate_limit_allotments_pkey; gateway_rate_limit_counters_pkey
-- (one probe per block named; see the migration's header).
DECLARE
    v_now timestamptz := coalesce(p_now, now());
BEGIN
    PERFORM pgadmit_lock_counters(
        array_agg(a.scope_type), array_agg(a.scope_key), array_agg(a.metric),
        array_agg(a.window_seconds), array_agg(a.window_start))
    FROM unnest(p_ids) AS u(id)
    CROSS JOIN LATERAL (
        SELECT x.scope_type, x.scope_key, x.metric, x.window_seconds, x.window_start
        FROM gateway_rate_limit_allotments AS x
        WHERE x.id = u.id AND (x.returned_at IS NULL) IS TRUE
        LIMIT 1
    ) AS a;

    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.used, u.reason, u.i
        FROM unnest(p_ids, p_used, p_reasons) WITH ORDINALITY AS u(id, used, reason, i)
    ),
    -- The update joins the blocks with the input on their id, and also
    -- tests the id against the ids given: a plan may scan either side
    -- first, and on the blocks' side the index scan reads only those named
    -- (the join alone let a plan read every block to find them). A block a
    -- concurrent report (AllotmentSync) changed meanwhile is tested again,
    -- id and open state, on its newest version; a concurrent return waited
    -- for the counter lock above.
    done AS (
        UPDATE gateway_rate_limit_allotments AS a
        SET returned_at = v_now,
            used = greatest(input.used, 0),
            consumed = greatest(input.used, 0),
            synced_at = v_now,
            reason = nullif(input.reason, '')
        FROM input
        WHERE a.id = input.id AND a.id = ANY(p_ids) AND (a.returned_at IS NULL) IS TRUE
        RETURNING input.i, a.scope_type, a.scope_key, a.metric, a.window_seconds, a.window_start, a.granted, a.used
    ),
    totals AS (
        SELECT d.scope_type, d.scope_key, d.metric, d.window_seconds, d.window_start,
               sum(d.granted) AS released, sum(d.used) AS used
        FROM done AS d
        GROUP BY d.scope_type, d.scope_key, d.metric, d.window_seconds, d.window_start
    ),
    moved AS (
        UPDATE gateway_rate_limit_counters AS c
        SET reserved_value = c.reserved_value - t.released,
            used_value = c.used_value + t.used,
            updated_at = v_now
        FROM totals AS t
        WHERE c.scope_type = t.scope_type AND c.scope_key = t.scope_key AND c.metric = t.metric
          AND c.window_seconds = t.window_seconds AND c.window_start = t.window_start
        RETURNING c.scope_type
    )
    SELECT input.i::integer, done.i IS NOT NULL, coalesce(done.granted, 0), coalesce(done.used, 0)
    FROM input
    LEFT JOIN done ON done.i = input.i;
END;
$$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_allot(
    p_holder         text,
    p_scope_type     text,
    p_scope_key      text,
    p_metric         text,
    p_window_seconds integer,
    p_limit          numeric,
    p_want           numeric,
    p_need           numeric,
    p_trim_id        uuid,
    p_trim_to        numeric,
    p_now            timestamptz DEFAULT NULL
)
RETURNS TABLE (
    allotment_id   uuid,        -- the new block; NULL when none was granted
    granted        numeric,     -- its units (0 when none)
    current_value  numeric,     -- the window's used_value when decided
    reserved_value numeric,     -- the window's reserved_value when decided (after the trim, before the grant)
    window_start   timestamptz,
    reset_at       timestamptz,
    db_now         timestamptz
)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
-- Takes a block of the current window's units for p_holder: p_want units,
-- or what the window has free when that is less, but never less than p_need
-- (the request waiting for it) and never more than half of what is free
-- when others may need the rest: no block is granted when p_need does not
-- fit. First, when p_trim_id names an open block of the same holder and
-- counter, it shrinks that block to p_trim_to (what it admitted), giving the
-- rest back to the window, so the units it did not use count for this grant.
-- Locks: the counter row (FOR UPDATE, by the upsert that creates a missing
-- one), then the trimmed and the new block rows (the lock order).
-- Index: gateway_rate_limit_counters_pkey; gateway_rate_limit_allotments_pkey.
DECLARE
    v_now     timestamptz := coalesce(p_now, now());
    v_start   timestamptz := date_bin(make_interval(secs => p_window_seconds), v_now, timestamptz 'epoch');
    v_trimmed numeric := 0;
    v_free    numeric;
    v_grant   numeric;
BEGIN
    window_start := v_start;
    reset_at := v_start + make_interval(secs => p_window_seconds);
    db_now := v_now;
    -- Lock (or create, empty) the counter row.
    INSERT INTO gateway_rate_limit_counters AS c (
        scope_type, scope_key, metric, window_seconds, window_start, reset_at,
        limit_value, created_at, updated_at
    )
    VALUES (p_scope_type, p_scope_key, p_metric, p_window_seconds, v_start,
            v_start + make_interval(secs => p_window_seconds), p_limit, v_now, v_now)
    ON CONFLICT ON CONSTRAINT gateway_rate_limit_counters_pkey DO UPDATE
    SET limit_value = c.limit_value
    WHERE false;
    SELECT c.used_value, c.reserved_value INTO current_value, reserved_value
    FROM gateway_rate_limit_counters AS c
    WHERE c.scope_type = p_scope_type AND c.scope_key = p_scope_key AND c.metric = p_metric
      AND c.window_seconds = p_window_seconds AND c.window_start = v_start
    FOR UPDATE;

    IF p_trim_id IS NOT NULL THEN
        WITH old AS (
            SELECT x.granted AS before FROM gateway_rate_limit_allotments AS x WHERE x.id = p_trim_id FOR UPDATE
        )
        UPDATE gateway_rate_limit_allotments AS a
        SET granted = greatest(p_trim_to, 0)
        FROM old
        WHERE a.id = p_trim_id AND a.returned_at IS NULL AND a.holder = p_holder
          AND a.scope_type = p_scope_type AND a.scope_key = p_scope_key AND a.metric = p_metric
          AND a.window_seconds = p_window_seconds AND a.window_start = v_start
          AND a.granted > greatest(p_trim_to, 0)
        RETURNING old.before - a.granted INTO v_trimmed;
        v_trimmed := coalesce(v_trimmed, 0);
        reserved_value := reserved_value - v_trimmed;
    END IF;

    v_free := p_limit - current_value - reserved_value;
    v_grant := 0;
    IF p_need <= v_free THEN
        v_grant := least(p_want, greatest(p_need, trunc(v_free / 2, 6)));
        v_grant := greatest(v_grant, p_need);
    END IF;
    IF v_grant > 0 THEN
        INSERT INTO gateway_rate_limit_allotments AS a (
            holder, scope_type, scope_key, metric, window_seconds, window_start, expires_at,
            limit_value, granted, created_at, synced_at
        )
        VALUES (p_holder, p_scope_type, p_scope_key, p_metric, p_window_seconds, v_start,
                v_start + make_interval(secs => p_window_seconds), p_limit, v_grant, v_now, v_now)
        RETURNING a.id INTO allotment_id;
    END IF;
    granted := v_grant;
    IF v_grant > 0 OR v_trimmed > 0 THEN
        UPDATE gateway_rate_limit_counters AS c
        SET reserved_value = c.reserved_value - v_trimmed + v_grant,
            limit_value = p_limit,
            updated_at = v_now
        WHERE c.scope_type = p_scope_type AND c.scope_key = p_scope_key AND c.metric = p_metric
          AND c.window_seconds = p_window_seconds AND c.window_start = v_start;
    END IF;
    RETURN NEXT;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_allot_return(
    p_ids     uuid[],
    p_used    numeric[],
    p_reasons text[],
    p_now     timestamptz DEFAULT NULL
)
RETURNS TABLE (
    ord      integer,  -- 1-based index into p_ids
    returned boolean,  -- this call returned it (false: already returned, or no such block)
    granted  numeric,
    used     numeric
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
-- Returns open blocks: each leaves its counter's reserved_value (its
-- granted units) and adds what its holder admitted (p_used) to used_value;
-- the block row records when, how much and why. Idempotent: a block already
-- returned is left alone.
-- Locks: the blocks' counters FOR UPDATE in primary-key order (the lock
-- order), then the block rows.
-- Index: gateway_rate_limit_allotments_pkey; gateway_rate_limit_counters_pkey.
DECLARE
    v_now timestamptz := coalesce(p_now, now());
BEGIN
    PERFORM pgadmit_lock_counters(
        array_agg(a.scope_type), array_agg(a.scope_key), array_agg(a.metric),
        array_agg(a.window_seconds), array_agg(a.window_start))
    FROM unnest(p_ids) AS u(id)
    CROSS JOIN LATERAL (
        SELECT x.scope_type, x.scope_key, x.metric, x.window_seconds, x.window_start
        FROM gateway_rate_limit_allotments AS x
        WHERE x.id = u.id AND x.returned_at IS NULL
        LIMIT 1
    ) AS a;

    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.used, u.reason, u.i
        FROM unnest(p_ids, p_used, p_reasons) WITH ORDINALITY AS u(id, used, reason, i)
    ),
    done AS (
        UPDATE gateway_rate_limit_allotments AS a
        SET returned_at = v_now,
            used = greatest(input.used, 0),
            consumed = greatest(input.used, 0),
            synced_at = v_now,
            reason = nullif(input.reason, '')
        FROM input
        WHERE a.id = input.id AND a.returned_at IS NULL
        RETURNING input.i, a.scope_type, a.scope_key, a.metric, a.window_seconds, a.window_start, a.granted, a.used
    ),
    totals AS (
        SELECT d.scope_type, d.scope_key, d.metric, d.window_seconds, d.window_start,
               sum(d.granted) AS released, sum(d.used) AS used
        FROM done AS d
        GROUP BY d.scope_type, d.scope_key, d.metric, d.window_seconds, d.window_start
    ),
    moved AS (
        UPDATE gateway_rate_limit_counters AS c
        SET reserved_value = c.reserved_value - t.released,
            used_value = c.used_value + t.used,
            updated_at = v_now
        FROM totals AS t
        WHERE c.scope_type = t.scope_type AND c.scope_key = t.scope_key AND c.metric = t.metric
          AND c.window_seconds = t.window_seconds AND c.window_start = t.window_start
        RETURNING c.scope_type
    )
    SELECT input.i::integer, done.i IS NOT NULL, coalesce(done.granted, 0), coalesce(done.used, 0)
    FROM input
    LEFT JOIN done ON done.i = input.i;
END;
$$;
-- +goose StatementEnd
