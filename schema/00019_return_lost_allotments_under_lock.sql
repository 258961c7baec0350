-- Recovery returns a lost block on what its row says under the row's lock.
--
-- Recover found lost blocks (RecoveryAllotmentFindLost: window ended, no
-- report for the grace) by an unlocked read, and returned them with
-- pgadmit_allot_return, charging the consumed it had read. A report of the
-- block (AllotmentSync) that committed between the two, while the return
-- waited for the row, was overwritten: the block's used and its counter's
-- used_value recorded the older, smaller consumed; and a block whose
-- holder had just shown it was alive was returned as lost, under it. Now a
-- call given p_lost_before returns lost blocks: each charges its consumed
-- as read under its row lock, and a block whose holder reported at or
-- after p_lost_before (RecoveryAllotmentFindLost's cutoff) is left alone:
-- it is not lost, and its holder returns it with the exact count of what
-- it admitted. Without p_lost_before a call charges p_used as before
-- (the holder's own returns: its exact count, which may be below a
-- consumed it reported, since a report counts requests in flight at their
-- estimate). A parameter added takes DROP and CREATE (CREATE OR REPLACE
-- cannot add one); as the last, with a default, a call of the old four
-- arguments (an older binary) runs unchanged.
-- TestRecoverChargesAReportThatCommitsWhileItWaits and
-- TestRecoverLeavesABlockWhoseHolderReportsWhileItWaits land a report
-- while Recover's return waits. Down restores the function of 00013 (body,
-- settings, signature) and the comment of 00006.

-- +goose Up
SET LOCAL lock_timeout = '5s';

DROP FUNCTION pgadmit_allot_return(uuid[], numeric[], text[], timestamptz);

-- +goose StatementBegin
CREATE FUNCTION pgadmit_allot_return(
    p_ids         uuid[],
    p_used        numeric[],
    p_reasons     text[],
    p_now         timestamptz DEFAULT NULL,
    p_lost_before timestamptz DEFAULT NULL
)
RETURNS TABLE (
    ord      integer,  -- 1-based index into p_ids
    returned boolean,  -- this call returned it (false: already returned, no such block, or not lost)
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
-- granted units) and adds what its holder admitted to used_value; the block
-- row records when, how much and why. What its holder admitted is p_used,
-- or, given p_lost_before (recovery returning the blocks of holders it
-- found lost), the block's consumed as read under its row lock (p_used is
-- not read), and then only a block whose last report (synced_at) is still
-- before p_lost_before is returned: one reported since is not lost.
-- Idempotent: a block already returned is left alone.
-- Locks: the blocks' counters FOR UPDATE in primary-key order (the lock
-- order), then the block rows.
-- Index: gateway_rate_limit_allotments_pkey; gateway_rate_limit_counters_pkey
-- (one probe per block named; see the header of migration 00013).
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
    -- id, open state and last report, on its newest version, and a lost
    -- block charges that version's consumed; a concurrent return waited for
    -- the counter lock above.
    done AS (
        UPDATE gateway_rate_limit_allotments AS a
        SET returned_at = v_now,
            used = CASE WHEN p_lost_before IS NULL THEN greatest(input.used, 0) ELSE a.consumed END,
            consumed = CASE WHEN p_lost_before IS NULL THEN greatest(input.used, 0) ELSE a.consumed END,
            synced_at = v_now,
            reason = nullif(input.reason, '')
        FROM input
        WHERE a.id = input.id AND a.id = ANY(p_ids) AND (a.returned_at IS NULL) IS TRUE
          AND (p_lost_before IS NULL OR a.synced_at < p_lost_before)
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
COMMENT ON FUNCTION pgadmit_allot_return(uuid[], numeric[], text[], timestamptz, timestamptz) IS
    'Returns blocks to their counters, charging what their holder admitted from them: p_used (AllotmentReturn, queries/allotments.sql), or, given p_lost_before, the consumed of a block still unreported since (RecoveryAllotmentReturnLost, queries/recovery.sql; read under the row lock).';

-- +goose Down
SET LOCAL lock_timeout = '5s';

DROP FUNCTION pgadmit_allot_return(uuid[], numeric[], text[], timestamptz, timestamptz);

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
COMMENT ON FUNCTION pgadmit_allot_return(uuid[], numeric[], text[], timestamptz) IS
    'Returns blocks to their counters, charging what their holder admitted from them. Called by AllotmentReturn (queries/allotments.sql) and by recovery.';
