-- The batch settle in time linear in its rows.
--
-- pgadmit_settle (00003) joined what it settled back to its input by
-- position (LEFT JOIN done ON done.i = input.i), and the counters it was
-- given to the reservations likewise (named.i = input.i). With hash and
-- merge joins off (function settings that keep every plan to index probes)
-- those joins are nested loops over CTE scans: time growing with the square
-- of the rows. One call of 1,024 reservations spent 98 of its 100 ms in the
-- first. Per reservation, in one combined statement: 35-45 us up to 128
-- rows, 58 us at 256, 145 us at 1,024; the library cuts its calls at 256
-- rows for that reason (settleChunk).
--
-- Now every array is read in one unnest (by position, no join), each row
-- probed and locked once, and the answer built from those probes: a row
-- is settled exactly when it was probed open (and on its named counter)
-- at its first place in the call, since the update changes every such row
-- it has locked. Same locks, same order; the rows not settled are no
-- longer read a second time.
--
-- Leases are released by primary key where they were by tuple id. A lease
-- that a renewal (or recovery) changed after the statement's snapshot, and
-- that the probe then locked in its newer version, was invisible to the
-- update by tuple id: it stayed live, and the call said it was not
-- released although it had been live. Nothing orders a renewal before the
-- snapshot as the counter lock orders every change of a reservation.
-- Down restores the body of 00003.
--
-- (Note added later: the body's header keeps the line of 00003, "Index:
-- ... gateway_concurrency_leases_pkey (probes, one per row; updates by tuple
-- id)". Since this migration only the reservations are updated by tuple id;
-- the leases are updated by gateway_concurrency_leases_pkey, as the
-- comment at their update says and EXPLAIN shows. The body is not edited
-- here: it is what databases migrated with this file hold.)

-- +goose Up
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_settle(
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
    p_now             timestamptz DEFAULT NULL
)
RETURNS TABLE (
    is_lease        boolean,  -- false: one of p_reservation_ids; true: one of p_lease_ids
    ord             integer,  -- 1-based index into that array
    id              uuid,
    settled         boolean,  -- this call committed or released it
    status          text,     -- reservation status after the call (NULL: no such reservation); leases: NULL
    metric          text,
    reserved_amount numeric,
    actual_amount   numeric
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
-- Settles a batch of open reservations, each to its status ('committed',
-- with its actual amount, or 'released') with its reason, and moves their
-- amounts in their counters; then releases unreleased leases, each with its
-- reason. Idempotent: what is already settled is reported with
-- settled = false and left alone.
-- p_scope_types .. p_window_starts name each reservation's counter, as the
-- caller's grant says; a reservation that draws on another counter is left
-- open and reported with settled = false. When they are NULL, the counters
-- are read from the reservations that are still open.
-- Locks: those counters FOR UPDATE, in primary-key order (the lock order),
-- in one statement; then the reservations and leases named (FOR UPDATE,
-- open or not), and updates the open ones and their counters.
-- Index: gateway_rate_limit_reservations_pkey; gateway_rate_limit_counters_pkey;
-- gateway_concurrency_leases_pkey (probes, one per row; updates by tuple id).
-- Statements: 2 (3 when the counters are not named), whatever the batch
-- size, and the lock of pgadmit_lock_counters. Its time grows with the rows
-- it is given, no faster (00016).
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    n_r        integer := coalesce(cardinality(p_reservation_ids), 0);
    k_type     text[] := p_scope_types;
    k_key      text[] := p_scope_keys;
    k_metric   text[] := p_metrics;
    k_seconds  integer[] := p_window_seconds;
    k_start    timestamptz[] := p_window_starts;
BEGIN
    IF n_r > 0 AND NOT (p_statuses <@ ARRAY['committed', 'released']) THEN
        RAISE EXCEPTION 'pgadmit_settle: every status must be committed or released'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n_r > 0 AND p_scope_types IS NULL THEN
        -- The counters of the reservations that are open now.
        SELECT array_agg(r.scope_type), array_agg(r.scope_key), array_agg(r.metric),
               array_agg(r.window_seconds), array_agg(r.window_start)
        INTO k_type, k_key, k_metric, k_seconds, k_start
        FROM unnest(p_reservation_ids) AS u(id)
        CROSS JOIN LATERAL (
            SELECT x.scope_type, x.scope_key, x.metric, x.window_seconds, x.window_start, x.status
            FROM gateway_rate_limit_reservations AS x
            WHERE x.id = u.id
            LIMIT 1
        ) AS r
        WHERE r.status = 'reserved';
    END IF;
    PERFORM pgadmit_lock_counters(k_type, k_key, k_metric, k_seconds, k_start);

    RETURN QUERY
    WITH input AS (
        -- One row per reservation, every array read by position in one
        -- unnest (NULL name arrays read as NULLs): no join by position.
        -- first: a reservation named twice (a retry racing its original) is
        -- settled by its first place only, as one update would.
        SELECT u.i, u.id, u.st, u.actual, u.reason, u.nt, u.nk, u.nm, u.nws, u.nwst,
               row_number() OVER (PARTITION BY u.id ORDER BY u.i) = 1 AS first
        FROM unnest(p_reservation_ids, p_statuses, p_actual_amounts, p_reasons,
                    p_scope_types, p_scope_keys, p_metrics, p_window_seconds, p_window_starts)
             WITH ORDINALITY AS u(id, st, actual, reason, nt, nk, nm, nws, nwst, i)
        WHERE u.i <= n_r
    ),
    -- Each reservation is found by its primary key alone and locked (open
    -- or not), then settled if still open (and on the named counter), by
    -- its tuple id. A status test in the probe would let a plan built while
    -- the table was empty scan the partial index of every open reservation
    -- instead, and keep doing so for the life of the session. Every row of
    -- the answer comes from here: the rows settled are those with settle
    -- set, all of which the update below changes. By tuple id: the
    -- version locked is visible to the statement's snapshot, taken after
    -- pgadmit_lock_counters, since whatever changes a reservation holds its
    -- counter first.
    probed AS (
        SELECT input.i, input.id, input.st, input.actual, input.reason, x.tid, x.status, x.metric,
               x.reserved_amount, x.actual_amount,
               (input.first AND x.status = 'reserved'
                AND (p_scope_types IS NULL
                     OR (x.scope_type = input.nt AND x.scope_key = input.nk AND x.metric = input.nm
                         AND x.window_seconds = input.nws AND x.window_start = input.nwst))) IS TRUE AS settle
        FROM input
        LEFT JOIN LATERAL (
            SELECT r.ctid AS tid, r.status, r.scope_type, r.scope_key, r.metric, r.window_seconds, r.window_start,
                   r.reserved_amount, r.actual_amount
            FROM gateway_rate_limit_reservations AS r
            WHERE r.id = input.id
            LIMIT 1
            FOR UPDATE
        ) AS x ON true
    ),
    done AS (
        UPDATE gateway_rate_limit_reservations AS r
        SET status = o.st,
            reason = nullif(o.reason, ''),
            actual_amount = CASE WHEN o.st = 'committed' THEN o.actual END,
            finalized_at = v_now,
            updated_at = v_now
        FROM probed AS o
        WHERE r.ctid = o.tid AND o.settle
        RETURNING r.scope_type, r.scope_key, r.metric, r.window_seconds, r.window_start,
                  r.reserved_amount, r.actual_amount
    ),
    totals AS (
        SELECT d.scope_type, d.scope_key, d.metric, d.window_seconds, d.window_start,
               sum(d.reserved_amount) AS released, coalesce(sum(d.actual_amount), 0) AS used
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
    ),
    lease_input AS (
        SELECT u.i, u.id, u.reason, row_number() OVER (PARTITION BY u.id ORDER BY u.i) = 1 AS first
        FROM unnest(p_lease_ids, p_lease_reasons) WITH ORDINALITY AS u(id, reason, i)
    ),
    live_leases AS (
        -- As the reservations: by primary key, locked, released if
        -- unreleased (at its first place); every row of the answer comes
        -- from here.
        SELECT u.i, u.id, u.reason, (u.first AND x.found AND x.released_at IS NULL) IS TRUE AS release
        FROM lease_input AS u
        LEFT JOIN LATERAL (
            SELECT true AS found, l.released_at
            FROM gateway_concurrency_leases AS l
            WHERE l.id = u.id
            LIMIT 1
            FOR UPDATE
        ) AS x ON true
    ),
    leases AS (
        -- By primary key, not tuple id: a renewal (which holds no counter)
        -- may have changed the lease after the statement's snapshot, and
        -- the version locked is then not visible to it; the update finds
        -- the visible one and moves to the locked one (EvalPlanQual).
        UPDATE gateway_concurrency_leases AS l
        SET released_at = v_now,
            reason = nullif(o.reason, '')
        FROM live_leases AS o
        WHERE l.id = o.id AND o.release
        RETURNING l.id
    )
    SELECT false, p.i::integer, p.id, p.settle,
           CASE WHEN p.settle THEN p.st ELSE p.status END, p.metric, p.reserved_amount,
           CASE WHEN p.settle THEN CASE WHEN p.st = 'committed' THEN p.actual END ELSE p.actual_amount END
    FROM probed AS p
    UNION ALL
    SELECT true, o.i::integer, o.id, o.release,
           NULL::text, NULL::text, NULL::numeric, NULL::numeric
    FROM live_leases AS o;
END;
$$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_settle(
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
    p_now             timestamptz DEFAULT NULL
)
RETURNS TABLE (
    is_lease        boolean,  -- false: one of p_reservation_ids; true: one of p_lease_ids
    ord             integer,  -- 1-based index into that array
    id              uuid,
    settled         boolean,  -- this call committed or released it
    status          text,     -- reservation status after the call (NULL: no such reservation); leases: NULL
    metric          text,
    reserved_amount numeric,
    actual_amount   numeric
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
-- Settles a batch of open reservations, each to its status ('committed',
-- with its actual amount, or 'released') with its reason, and moves their
-- amounts in their counters; then releases unreleased leases, each with its
-- reason. Idempotent: what is already settled is reported with
-- settled = false and left alone.
-- p_scope_types .. p_window_starts name each reservation's counter, as the
-- caller's grant says; a reservation that draws on another counter is left
-- open and reported with settled = false. When they are NULL, the counters
-- are read from the reservations that are still open.
-- Locks: those counters FOR UPDATE, in primary-key order (the lock order),
-- in one statement; then the reservations and leases named (FOR UPDATE,
-- open or not), and updates the open ones and their counters.
-- Index: gateway_rate_limit_reservations_pkey; gateway_rate_limit_counters_pkey;
-- gateway_concurrency_leases_pkey (probes, one per row; updates by tuple id).
-- Statements: 2 (3 when the counters are not named), whatever the batch
-- size, and the lock of pgadmit_lock_counters.
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    n_r        integer := coalesce(cardinality(p_reservation_ids), 0);
    k_type     text[] := p_scope_types;
    k_key      text[] := p_scope_keys;
    k_metric   text[] := p_metrics;
    k_seconds  integer[] := p_window_seconds;
    k_start    timestamptz[] := p_window_starts;
BEGIN
    IF n_r > 0 AND NOT (p_statuses <@ ARRAY['committed', 'released']) THEN
        RAISE EXCEPTION 'pgadmit_settle: every status must be committed or released'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n_r > 0 AND p_scope_types IS NULL THEN
        -- The counters of the reservations that are open now.
        SELECT array_agg(r.scope_type), array_agg(r.scope_key), array_agg(r.metric),
               array_agg(r.window_seconds), array_agg(r.window_start)
        INTO k_type, k_key, k_metric, k_seconds, k_start
        FROM unnest(p_reservation_ids) AS u(id)
        CROSS JOIN LATERAL (
            SELECT x.scope_type, x.scope_key, x.metric, x.window_seconds, x.window_start, x.status
            FROM gateway_rate_limit_reservations AS x
            WHERE x.id = u.id
            LIMIT 1
        ) AS r
        WHERE r.status = 'reserved';
    END IF;
    PERFORM pgadmit_lock_counters(k_type, k_key, k_metric, k_seconds, k_start);

    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.st, u.actual, u.reason, u.i
        FROM unnest(p_reservation_ids, p_statuses, p_actual_amounts, p_reasons) WITH ORDINALITY AS u(id, st, actual, reason, i)
    ),
    named AS (
        SELECT u.i, u.st, u.sk, u.m, u.ws, u.wst
        FROM unnest(p_scope_types, p_scope_keys, p_metrics, p_window_seconds, p_window_starts)
             WITH ORDINALITY AS u(st, sk, m, ws, wst, i)
    ),
    -- Each reservation is found by its primary key alone and locked, then
    -- kept if still open (and on the named counter), then updated by its
    -- tuple id. A status test in the probe would let a plan built while the
    -- table was empty scan the partial index of every open reservation
    -- instead, and keep doing so for the life of the session.
    open_rows AS (
        SELECT input.i, input.st, input.actual, input.reason, x.tid
        FROM input
        LEFT JOIN named ON named.i = input.i
        CROSS JOIN LATERAL (
            SELECT r.ctid AS tid, r.status, r.scope_type, r.scope_key, r.metric, r.window_seconds, r.window_start
            FROM gateway_rate_limit_reservations AS r
            WHERE r.id = input.id
            LIMIT 1
            FOR UPDATE
        ) AS x
        WHERE x.status = 'reserved'
          AND (p_scope_types IS NULL
               OR (x.scope_type = named.st AND x.scope_key = named.sk AND x.metric = named.m
                   AND x.window_seconds = named.ws AND x.window_start = named.wst))
    ),
    done AS (
        UPDATE gateway_rate_limit_reservations AS r
        SET status = o.st,
            reason = nullif(o.reason, ''),
            actual_amount = CASE WHEN o.st = 'committed' THEN o.actual END,
            finalized_at = v_now,
            updated_at = v_now
        FROM open_rows AS o
        WHERE r.ctid = o.tid
        RETURNING o.i, r.scope_type, r.scope_key, r.metric, r.window_seconds, r.window_start,
                  r.status, r.reserved_amount, r.actual_amount
    ),
    totals AS (
        SELECT d.scope_type, d.scope_key, d.metric, d.window_seconds, d.window_start,
               sum(d.reserved_amount) AS released, coalesce(sum(d.actual_amount), 0) AS used
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
    ),
    live_leases AS (
        -- As the reservations: by primary key, locked, kept if unreleased.
        SELECT u.i, u.reason, x.tid
        FROM unnest(p_lease_ids, p_lease_reasons) WITH ORDINALITY AS u(id, reason, i)
        CROSS JOIN LATERAL (
            SELECT l.ctid AS tid, l.released_at
            FROM gateway_concurrency_leases AS l
            WHERE l.id = u.id
            LIMIT 1
            FOR UPDATE
        ) AS x
        WHERE x.released_at IS NULL
    ),
    leases AS (
        UPDATE gateway_concurrency_leases AS l
        SET released_at = v_now,
            reason = nullif(o.reason, '')
        FROM live_leases AS o
        WHERE l.ctid = o.tid
        RETURNING o.i
    )
    SELECT false, input.i::integer, input.id, done.i IS NOT NULL,
           coalesce(done.status, prior.status), coalesce(done.metric, prior.metric),
           coalesce(done.reserved_amount, prior.reserved_amount),
           CASE WHEN done.i IS NOT NULL THEN done.actual_amount ELSE prior.actual_amount END
    FROM input
    LEFT JOIN done ON done.i = input.i
    LEFT JOIN LATERAL (
        -- What was not settled now, as it is (read only for those rows).
        SELECT p.status, p.metric, p.reserved_amount, p.actual_amount
        FROM gateway_rate_limit_reservations AS p
        WHERE p.id = input.id AND done.i IS NULL
        LIMIT 1
    ) AS prior ON true
    UNION ALL
    SELECT true, u.i::integer, u.id, EXISTS (SELECT 1 FROM leases WHERE leases.i = u.i),
           NULL::text, NULL::text, NULL::numeric, NULL::numeric
    FROM unnest(p_lease_ids) WITH ORDINALITY AS u(id, i);
END;
$$;
-- +goose StatementEnd
