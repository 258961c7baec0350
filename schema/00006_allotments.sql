-- Allotments: blocks of a window's units that one process takes in advance
-- and admits from in its own memory, with no round trip per request.
--
-- A block is reserved in its counter like a reservation (its granted units
-- are part of the counter's reserved_value while it is open), so however
-- many processes hold blocks, the window never admits more than its limit.
-- The holder returns the block when the window ends, when it is idle or
-- when the holder closes: its units leave reserved_value, and what the
-- holder admitted from it (the actual amounts of the requests it committed,
-- the estimates of those it could not settle) enters used_value. A block
-- never outlives its window: a holder that dies strands at most its blocks,
-- until their window ends, and never over-admits; recovery then closes them.

-- +goose Up
SET LOCAL lock_timeout = '5s';

CREATE TABLE gateway_rate_limit_allotments (
    id             uuid        PRIMARY KEY DEFAULT pgadmit_uuidv7(),
    holder         text        NOT NULL,
    scope_type     text        NOT NULL,
    scope_key      text        NOT NULL,
    metric         text        NOT NULL,
    window_seconds integer     NOT NULL,
    window_start   timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    limit_value    numeric     NOT NULL,
    granted        numeric     NOT NULL,
    consumed       numeric     NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT now(),
    synced_at      timestamptz NOT NULL DEFAULT now(),
    returned_at    timestamptz,
    used           numeric,
    reason         text,
    CONSTRAINT gateway_rate_limit_allotments_amounts_check CHECK (granted >= 0 AND consumed >= 0 AND used >= 0)
);
COMMENT ON TABLE gateway_rate_limit_allotments IS
    'Blocks of a window''s units that a process took in advance to admit from in its own memory (Limit.Local). Open blocks are part of their counter''s reserved_value; a returned block''s used amount is part of its used_value.';
COMMENT ON COLUMN gateway_rate_limit_allotments.id IS 'Block identity.';
COMMENT ON COLUMN gateway_rate_limit_allotments.holder IS 'The process (Limiter) that holds the block: host, pid and a random suffix unless the application names it.';
COMMENT ON COLUMN gateway_rate_limit_allotments.scope_type IS 'Scope kind of the counter the block draws on.';
COMMENT ON COLUMN gateway_rate_limit_allotments.scope_key IS 'Scope of the counter the block draws on.';
COMMENT ON COLUMN gateway_rate_limit_allotments.metric IS 'Metric of the counter the block draws on.';
COMMENT ON COLUMN gateway_rate_limit_allotments.window_seconds IS 'Window length of the counter the block draws on.';
COMMENT ON COLUMN gateway_rate_limit_allotments.window_start IS 'Window of the counter the block draws on.';
COMMENT ON COLUMN gateway_rate_limit_allotments.expires_at IS 'End of that window: the block admits nothing after it.';
COMMENT ON COLUMN gateway_rate_limit_allotments.limit_value IS 'Limit in force when the block was taken.';
COMMENT ON COLUMN gateway_rate_limit_allotments.granted IS 'Units held in the counter''s reserved_value while the block is open; a block trimmed to what it admitted keeps only that.';
COMMENT ON COLUMN gateway_rate_limit_allotments.consumed IS 'What the holder had admitted from the block (estimates of requests in flight plus actual amounts of settled ones) when it last reported (synced_at).';
COMMENT ON COLUMN gateway_rate_limit_allotments.created_at IS 'When the block was taken.';
COMMENT ON COLUMN gateway_rate_limit_allotments.synced_at IS 'When the holder last reported consumed: a holder that stops reporting is gone.';
COMMENT ON COLUMN gateway_rate_limit_allotments.returned_at IS 'When the block was returned; NULL while open.';
COMMENT ON COLUMN gateway_rate_limit_allotments.used IS 'Charged to the counter''s used_value on return: what the holder admitted (may exceed granted when actual amounts overshot their estimates); for a lost holder, its last report.';
COMMENT ON COLUMN gateway_rate_limit_allotments.reason IS 'Why it was returned: window_ended, idle, trimmed, closed, holder_lost.';
COMMENT ON CONSTRAINT gateway_rate_limit_allotments_amounts_check ON gateway_rate_limit_allotments IS 'Amounts are never negative.';
COMMENT ON INDEX gateway_rate_limit_allotments_pkey IS 'Sync and return find blocks by id.';
CREATE INDEX gateway_rate_limit_allotments_open_idx ON gateway_rate_limit_allotments (expires_at)
    WHERE returned_at IS NULL;
COMMENT ON INDEX gateway_rate_limit_allotments_open_idx IS
    'Open blocks by window end: recovery closes those whose window ended and whose holder did not return them; doctor and inspect read the open ones (live state, small).';
CREATE INDEX gateway_rate_limit_allotments_window_idx ON gateway_rate_limit_allotments (window_start, id);
COMMENT ON INDEX gateway_rate_limit_allotments_window_idx IS 'Serves prune: returned blocks of windows that ended before a cutoff, in keyset pages.';

-- +goose StatementBegin
CREATE FUNCTION pgadmit_allot(
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
COMMENT ON FUNCTION pgadmit_allot(text, text, text, text, integer, numeric, numeric, numeric, uuid, numeric, timestamptz) IS
    'Takes a block of the current window''s units for a holder (and first trims its previous block to what it admitted). Called by AllotmentTake (queries/allotments.sql).';

-- +goose StatementBegin
CREATE FUNCTION pgadmit_allot_return(
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
COMMENT ON FUNCTION pgadmit_allot_return(uuid[], numeric[], text[], timestamptz) IS
    'Returns blocks to their counters, charging what their holder admitted from them. Called by AllotmentReturn (queries/allotments.sql) and by recovery.';

-- +goose Down
SET LOCAL lock_timeout = '5s';

DROP FUNCTION pgadmit_allot_return(uuid[], numeric[], text[], timestamptz);
DROP FUNCTION pgadmit_allot(text, text, text, text, integer, numeric, numeric, numeric, uuid, numeric, timestamptz);
DROP TABLE gateway_rate_limit_allotments;
