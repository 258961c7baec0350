-- Leases count and expire from the clock read once their scopes are held.
--
-- pgadmit_reserve (00011) counted a concurrency scope's live leases, and
-- set a new lease's expiry, from now(): the start of the transaction,
-- which for a Reserve is when its statement started, before it waited for
-- the scopes' advisory locks and counter rows. A statement that waited
-- longer than a lease's TTL (another session holding the scope in a long
-- transaction, a WithTx renewal say) wrote its lease already expired and
-- returned it as a grant: no admission counted it, and the scope admitted
-- past its limit while the caller held it. Now the leases' clock is read
-- after the locks (clock_timestamp(), never before now()), as a renewal's
-- is; window bounds and the decision's db_now keep now(). Same signature
-- and answers. Down restores the body of 00011.

-- +goose Up
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_reserve(
    p_task_ids          uuid[],
    p_attempt_ids       uuid[],
    p_w_admission       integer[],
    p_w_scope_types     text[],
    p_w_scope_keys      text[],
    p_w_metrics         text[],
    p_w_window_seconds  integer[],
    p_w_limits          numeric[],
    p_w_amounts         numeric[],
    p_c_admission       integer[],
    p_c_scope_types     text[],
    p_c_scope_keys      text[],
    p_c_limits          numeric[],
    p_c_amounts         numeric[],
    p_c_ttl_seconds     integer[],
    p_now               timestamptz DEFAULT NULL
)
RETURNS TABLE (
    admission      integer,     -- 1-based index into p_task_ids
    is_lease       boolean,     -- false: a window limit (p_w_*), true: a concurrency limit (p_c_*)
    ord            integer,     -- 1-based index into the p_w_* or p_c_* arrays
    fits           boolean,     -- whether this limit had room when its admission was decided
    grant_id       uuid,        -- the reservation or lease written; NULL when the admission was refused
    current_value  numeric,     -- window: used_value; concurrency: live lease total (before this admission)
    reserved_value numeric,     -- window: reserved_value before this admission; concurrency: 0
    window_start   timestamptz, -- window start; concurrency: db_now
    reset_at       timestamptz, -- window end; concurrency: the lease's expiry, or the earliest live expiry
    db_now         timestamptz, -- the database clock the decision used
    refusal        text         -- '' or why the whole admission was refused before any limit was looked at
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
-- Decides a batch of admissions, each all or nothing, in arrival order:
-- one entry per admission in p_task_ids and p_attempt_ids (NULL for none);
-- window limits in p_w_* and concurrency limits in p_c_*, grouped by
-- admission in admission order (p_w_admission and p_c_admission name each
-- limit's admission). Returns one row per limit. Refused admissions write
-- nothing, except that a counter row the batch found missing stays behind
-- with zero usage.
-- Locks: every distinct window counter row of the batch, once, in
-- primary-key order, by one upsert (which creates missing rows); then
-- pg_advisory_xact_lock on each distinct concurrency scope in lock-key
-- order; then inserts reservation and lease rows (FK key-share locks on
-- the task and attempt rows).
-- Index: gateway_rate_limit_counters_pkey (conflict arbiter and probes; updates by tuple id);
-- gateway_concurrency_leases_live_scope_idx (live leases of each scope);
-- pgadmit_task_refusal for task guards, and pgadmit_task_recheck once the
-- rows are written (a task finished meanwhile rolls the batch back).
-- Statements: 4 for a batch of one-window admissions that all fit (the
-- upsert takes each counter's whole amount at once), up to 9 otherwise,
-- whatever the batch size.
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    -- The clock of the leases: read again once the scopes' locks are held
    -- (see below), the transaction's start until then (a batch refused
    -- before it takes them answers with it).
    v_lease_now timestamptz := coalesce(p_now, now());
    n_adm      integer := coalesce(cardinality(p_task_ids), 0);
    n_w        integer := coalesce(cardinality(p_w_scope_types), 0);
    n_c        integer := coalesce(cardinality(p_c_scope_types), 0);
    v_refusal  text[];
    v_admitted boolean[];
    a_limits   integer[];      -- per admission: how many limits it has
    -- per window limit
    w_slot     integer[];
    w_fits     boolean[];
    w_used     numeric[];
    w_reserved numeric[];
    w_id       uuid[];
    -- per distinct counter (slot), in lock order
    s_type     text[];
    s_key      text[];
    s_metric   text[];
    s_seconds  integer[];
    s_start    timestamptz[];
    s_used     numeric[];
    s_reserved numeric[];
    s_take     numeric[];      -- what the upsert adds: the whole batch's amount, or 0 (lock only)
    s_guard    numeric[];      -- the limit the upsert checks s_take against
    s_done     boolean[];      -- the upsert added s_take: every admission on it is admitted
    s_simple   boolean[];      -- every limit on it is its admission's only limit
    s_delta    numeric[];      -- what the decisions below add
    s_limit    numeric[];      -- the limit written on the row (the last one)
    n_s        integer := 0;
    v_slots    integer[];
    v_used     numeric[];
    v_reserved numeric[];
    -- per concurrency limit, and per distinct scope
    c_slot     integer[];
    c_fits     boolean[];
    c_active   numeric[];
    c_id       uuid[];
    t_active   numeric[];
    t_next     timestamptz[];
    v_ok       boolean;
    i          integer;
    j          integer;
    s          integer;
    wi         integer := 1;
    ci         integer := 1;
    w0         integer;
    c0         integer;
BEGIN
    -- Every per-limit array is filled to its full length up front: a
    -- PL/pgSQL array first assigned at element k starts at k.
    v_refusal := array_fill(''::text, ARRAY[n_adm]);
    v_admitted := array_fill(false, ARRAY[n_adm]);
    w_fits := array_fill(false, ARRAY[n_w]);
    w_used := array_fill(0::numeric, ARRAY[n_w]);
    w_reserved := array_fill(0::numeric, ARRAY[n_w]);
    w_id := array_fill(NULL::uuid, ARRAY[n_w]);
    c_fits := array_fill(false, ARRAY[n_c]);
    c_active := array_fill(0::numeric, ARRAY[n_c]);
    c_id := array_fill(NULL::uuid, ARRAY[n_c]);

    -- Reads are exact only in READ COMMITTED: each statement sees what the
    -- previous holder of a lock committed.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        v_refusal := array_fill('isolation'::text, ARRAY[n_adm]);
        n_w := 0;
        n_c := 0;
    END IF;
    FOR i IN 1 .. n_adm LOOP
        IF v_refusal[i] = '' AND (p_task_ids[i] IS NOT NULL OR p_attempt_ids[i] IS NOT NULL) THEN
            v_refusal[i] := pgadmit_task_refusal(p_task_ids[i], p_attempt_ids[i]);
        END IF;
    END LOOP;

    IF n_w > 0 THEN
        -- The distinct counters in lock order, and each limit's counter.
        WITH l AS (
            SELECT u.i, u.st, u.sk, u.m, u.ws,
                   dense_rank() OVER (ORDER BY u.st COLLATE "C", u.sk COLLATE "C", u.m COLLATE "C", u.ws)::integer AS slot
            FROM unnest(p_w_scope_types, p_w_scope_keys, p_w_metrics, p_w_window_seconds)
                 WITH ORDINALITY AS u(st, sk, m, ws, i)
        ),
        d AS (
            SELECT DISTINCT l.slot, l.st, l.sk, l.m, l.ws FROM l
        )
        SELECT (SELECT array_agg(l.slot ORDER BY l.i) FROM l),
               array_agg(d.st ORDER BY d.slot), array_agg(d.sk ORDER BY d.slot),
               array_agg(d.m ORDER BY d.slot), array_agg(d.ws ORDER BY d.slot)
        INTO w_slot, s_type, s_key, s_metric, s_seconds
        FROM d;
        n_s := cardinality(s_type);

        -- A counter whose every limit is its admission's only one (a batch
        -- of one-window admissions, the common shape) takes, when it fits,
        -- the whole of what the batch asks of it in the upsert below. The
        -- upsert checks that sum against the smallest of their limits,
        -- which is enough for every one of them to fit in arrival order.
        a_limits := array_fill(0, ARRAY[n_adm]);
        FOR i IN 1 .. n_w LOOP
            a_limits[p_w_admission[i]] := a_limits[p_w_admission[i]] + 1;
        END LOOP;
        FOR i IN 1 .. n_c LOOP
            a_limits[p_c_admission[i]] := a_limits[p_c_admission[i]] + 1;
        END LOOP;
        s_take := array_fill(0::numeric, ARRAY[n_s]);
        s_guard := array_fill(NULL::numeric, ARRAY[n_s]);
        s_simple := array_fill(true, ARRAY[n_s]);
        s_limit := array_fill(0::numeric, ARRAY[n_s]);
        s_start := array_fill(NULL::timestamptz, ARRAY[n_s]);
        FOR i IN 1 .. n_w LOOP
            s := w_slot[i];
            s_limit[s] := p_w_limits[i];
            IF a_limits[p_w_admission[i]] <> 1 THEN
                s_simple[s] := false;
            ELSIF v_refusal[p_w_admission[i]] = '' THEN
                s_take[s] := s_take[s] + p_w_amounts[i];
                s_guard[s] := least(s_guard[s], p_w_limits[i]);
            END IF;
        END LOOP;
        FOR s IN 1 .. n_s LOOP
            s_start[s] := date_bin(make_interval(secs => s_seconds[s]), v_now, timestamptz 'epoch');
            IF NOT s_simple[s] OR s_take[s] > s_guard[s] THEN
                s_take[s] := 0;
            END IF;
            IF s_take[s] = 0 THEN
                s_guard[s] := s_limit[s];
            END IF;
        END LOOP;

        -- One upsert locks every counter in lock order (inserting missing
        -- ones) and adds s_take where it fits; a row it only locked (s_take
        -- 0, or not fitting) it leaves unchanged.
        WITH up AS (
            INSERT INTO gateway_rate_limit_counters AS c (
                scope_type, scope_key, metric, window_seconds, window_start, reset_at,
                limit_value, reserved_value, created_at, updated_at
            )
            SELECT u.st, u.sk, u.m, u.ws, u.wst, u.wst + make_interval(secs => u.ws),
                   u.guard, u.take, v_now, v_now
            FROM unnest(s_type, s_key, s_metric, s_seconds, s_start, s_guard, s_take)
                 WITH ORDINALITY AS u(st, sk, m, ws, wst, guard, take, slot)
            ORDER BY u.slot
            ON CONFLICT ON CONSTRAINT gateway_rate_limit_counters_pkey DO UPDATE
            SET reserved_value = c.reserved_value + excluded.reserved_value,
                limit_value = excluded.limit_value,
                updated_at = excluded.updated_at
            WHERE excluded.reserved_value > 0
              AND c.used_value + c.reserved_value + excluded.reserved_value <= excluded.limit_value
            RETURNING c.scope_type, c.scope_key, c.metric, c.window_seconds, c.used_value, c.reserved_value
        )
        SELECT array_agg(k.slot::integer), array_agg(up.used_value), array_agg(up.reserved_value)
        INTO v_slots, v_used, v_reserved
        FROM up
        JOIN unnest(s_type, s_key, s_metric, s_seconds) WITH ORDINALITY AS k(st, sk, m, ws, slot)
          ON k.st = up.scope_type AND k.sk = up.scope_key AND k.m = up.metric AND k.ws = up.window_seconds;

        s_done := array_fill(false, ARRAY[n_s]);
        s_used := array_fill(NULL::numeric, ARRAY[n_s]);
        s_reserved := array_fill(NULL::numeric, ARRAY[n_s]);
        FOR j IN 1 .. coalesce(cardinality(v_slots), 0) LOOP
            s := v_slots[j];
            s_done[s] := s_take[s] > 0;
            s_used[s] := v_used[j];
            s_reserved[s] := v_reserved[j] - s_take[s]; -- before this batch
        END LOOP;
        -- The rows it only locked: read them (their lock is ours, so this
        -- reads what the decision below may rely on).
        IF NOT (true = ALL(s_done)) THEN
            SELECT array_agg(k.slot::integer), array_agg(c.used_value), array_agg(c.reserved_value)
            INTO v_slots, v_used, v_reserved
            FROM unnest(s_type, s_key, s_metric, s_seconds, s_start, s_done)
                 WITH ORDINALITY AS k(st, sk, m, ws, wst, done, slot)
            CROSS JOIN LATERAL (
                SELECT x.used_value, x.reserved_value
                FROM gateway_rate_limit_counters AS x
                WHERE x.scope_type = k.st AND x.scope_key = k.sk AND x.metric = k.m
                  AND x.window_seconds = k.ws AND x.window_start = k.wst
                LIMIT 1
            ) AS c
            WHERE NOT k.done;
            FOR j IN 1 .. coalesce(cardinality(v_slots), 0) LOOP
                s_used[v_slots[j]] := v_used[j];
                s_reserved[v_slots[j]] := v_reserved[j];
            END LOOP;
        END IF;
        s_delta := array_fill(0::numeric, ARRAY[n_s]);
    END IF;

    IF n_c > 0 THEN
        -- One advisory lock per concurrency scope, in lock-key order; then,
        -- in a statement that sees what the previous holders committed, the
        -- live leases of each scope.
        PERFORM pg_advisory_xact_lock(s.lock_key)
        FROM (
            SELECT DISTINCT hashtextextended(
                       'pgadmit/concurrent/' || length(u.st)::text || ':' || u.st || '/' || u.sk, 0) AS lock_key
            FROM unnest(p_c_scope_types, p_c_scope_keys) AS u(st, sk)
            ORDER BY lock_key
        ) AS s
        ORDER BY s.lock_key;
        -- Leases are counted live, and new ones expire, from the clock read
        -- now that the scopes are held: a statement that waited for a
        -- scope longer than a TTL (another session held it) would otherwise
        -- write a lease expired already, which no admission counts. A
        -- renewal reads its clock after the same locks, so it cannot bring
        -- back a lease this count took as expired.
        v_lease_now := coalesce(p_now, greatest(v_now, clock_timestamp()));
        WITH l AS (
            SELECT u.i, u.st, u.sk,
                   dense_rank() OVER (ORDER BY u.st COLLATE "C", u.sk COLLATE "C")::integer AS slot
            FROM unnest(p_c_scope_types, p_c_scope_keys) WITH ORDINALITY AS u(st, sk, i)
        ),
        d AS (
            SELECT DISTINCT l.slot, l.st, l.sk FROM l
        )
        SELECT (SELECT array_agg(l.slot ORDER BY l.i) FROM l),
               array_agg(live.active ORDER BY d.slot), array_agg(live.next_expiry ORDER BY d.slot)
        INTO c_slot, t_active, t_next
        FROM d
        CROSS JOIN LATERAL (
            SELECT coalesce(sum(x.lease_value), 0) AS active, min(x.expires_at) AS next_expiry
            FROM gateway_concurrency_leases AS x
            WHERE x.scope_type = d.st AND x.scope_key = d.sk
              AND x.released_at IS NULL AND x.expires_at > v_lease_now
        ) AS live;
    END IF;

    -- Decide each admission in arrival order against running totals: an
    -- admitted one counts for those after it. On a counter whose upsert
    -- took the whole batch's amount, every admission was admitted.
    FOR i IN 1 .. n_adm LOOP
        w0 := wi;
        WHILE wi <= n_w AND p_w_admission[wi] = i LOOP
            wi := wi + 1;
        END LOOP;
        c0 := ci;
        WHILE ci <= n_c AND p_c_admission[ci] = i LOOP
            ci := ci + 1;
        END LOOP;
        v_ok := v_refusal[i] = '';
        FOR j IN w0 .. wi - 1 LOOP
            s := w_slot[j];
            w_used[j] := s_used[s];
            w_reserved[j] := s_reserved[s];
            w_fits[j] := s_done[s] OR s_used[s] + s_reserved[s] + p_w_amounts[j] <= p_w_limits[j];
            v_ok := v_ok AND w_fits[j];
        END LOOP;
        FOR j IN c0 .. ci - 1 LOOP
            c_active[j] := t_active[c_slot[j]];
            c_fits[j] := c_active[j] + p_c_amounts[j] <= p_c_limits[j];
            v_ok := v_ok AND c_fits[j];
        END LOOP;
        IF v_ok THEN
            v_admitted[i] := true;
            FOR j IN w0 .. wi - 1 LOOP
                s := w_slot[j];
                s_reserved[s] := s_reserved[s] + p_w_amounts[j];
                IF NOT s_done[s] THEN
                    s_delta[s] := s_delta[s] + p_w_amounts[j];
                END IF;
                w_id[j] := pgadmit_uuidv7();
            END LOOP;
            FOR j IN c0 .. ci - 1 LOOP
                t_active[c_slot[j]] := t_active[c_slot[j]] + p_c_amounts[j];
                c_id[j] := pgadmit_uuidv7();
            END LOOP;
        END IF;
    END LOOP;

    -- Write what was admitted: the counters the upsert did not add to, then
    -- the ledger rows.
    IF n_w > 0 AND NOT (0 = ALL(s_delta)) THEN
        -- Each row found by its primary key (LATERAL: one probe per
        -- counter), then updated by tuple id. A join of the counters with
        -- the arrays could be turned around, into a scan of every counter,
        -- once the statistics say the table is small (a VACUUM while it
        -- was): the arrays are guessed at 100 rows.
        UPDATE gateway_rate_limit_counters AS c
        SET reserved_value = c.reserved_value + k.delta,
            limit_value = k.lim,
            updated_at = v_now
        FROM (
            SELECT x.tid, u.delta, u.lim
            FROM unnest(s_type, s_key, s_metric, s_seconds, s_start, s_delta, s_limit)
                 AS u(st, sk, m, ws, wst, delta, lim)
            CROSS JOIN LATERAL (
                SELECT r.ctid AS tid
                FROM gateway_rate_limit_counters AS r
                WHERE r.scope_type = u.st AND r.scope_key = u.sk AND r.metric = u.m
                  AND r.window_seconds = u.ws AND r.window_start = u.wst
                LIMIT 1
            ) AS x
            WHERE u.delta > 0
        ) AS k
        WHERE c.ctid = k.tid;
    END IF;
    IF n_w > 0 AND true = ANY(v_admitted) THEN
        INSERT INTO gateway_rate_limit_reservations (
            id, task_id, attempt_id, scope_type, scope_key, metric, window_seconds, window_start,
            limit_value, reserved_amount, created_at, updated_at
        )
        SELECT u.id, p_task_ids[u.adm], p_attempt_ids[u.adm], u.st, u.sk, u.m, u.ws, s_start[u.slot],
               u.lim, u.amount, v_now, v_now
        FROM unnest(w_id, p_w_admission, w_slot, p_w_scope_types, p_w_scope_keys, p_w_metrics,
                    p_w_window_seconds, p_w_limits, p_w_amounts)
             AS u(id, adm, slot, st, sk, m, ws, lim, amount)
        WHERE u.id IS NOT NULL;
    END IF;
    IF n_c > 0 AND true = ANY(v_admitted) THEN
        INSERT INTO gateway_concurrency_leases (
            id, task_id, attempt_id, scope_type, scope_key, lease_value, limit_value, expires_at, created_at
        )
        SELECT u.id, p_task_ids[u.adm], p_attempt_ids[u.adm], u.st, u.sk, u.amount, u.lim,
               v_lease_now + make_interval(secs => u.ttl), v_now
        FROM unnest(c_id, p_c_admission, p_c_scope_types, p_c_scope_keys, p_c_limits, p_c_amounts, p_c_ttl_seconds)
             AS u(id, adm, st, sk, lim, amount, ttl)
        WHERE u.id IS NOT NULL;
    END IF;
    -- The tasks of admitted admissions checked again, now that the inserts
    -- above hold their rows (pgadmit_task_recheck).
    IF true = ANY(v_admitted) AND (cardinality(array_remove(p_task_ids, NULL)) > 0
                                   OR cardinality(array_remove(p_attempt_ids, NULL)) > 0) THEN
        PERFORM pgadmit_task_recheck(p_task_ids, p_attempt_ids, v_admitted);
    END IF;

    RETURN QUERY
    SELECT u.adm, false, u.i::integer, u.fits, u.id, u.used, u.reserved,
           date_bin(make_interval(secs => u.ws), v_now, timestamptz 'epoch'),
           date_bin(make_interval(secs => u.ws), v_now, timestamptz 'epoch') + make_interval(secs => u.ws),
           v_now, v_refusal[u.adm]
    FROM unnest(p_w_admission, p_w_window_seconds, w_fits, w_id, w_used, w_reserved)
         WITH ORDINALITY AS u(adm, ws, fits, id, used, reserved, i)
    UNION ALL
    SELECT u.adm, true, u.i::integer, u.fits, u.id, u.active, 0::numeric, v_now,
           CASE WHEN u.id IS NOT NULL THEN v_lease_now + make_interval(secs => u.ttl)
                ELSE coalesce(t_next[c_slot[u.i]], v_lease_now + make_interval(secs => u.ttl)) END,
           v_now, v_refusal[u.adm]
    FROM unnest(p_c_admission, p_c_ttl_seconds, c_fits, c_id, c_active)
         WITH ORDINALITY AS u(adm, ttl, fits, id, active, i);
END;
$$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_reserve(
    p_task_ids          uuid[],
    p_attempt_ids       uuid[],
    p_w_admission       integer[],
    p_w_scope_types     text[],
    p_w_scope_keys      text[],
    p_w_metrics         text[],
    p_w_window_seconds  integer[],
    p_w_limits          numeric[],
    p_w_amounts         numeric[],
    p_c_admission       integer[],
    p_c_scope_types     text[],
    p_c_scope_keys      text[],
    p_c_limits          numeric[],
    p_c_amounts         numeric[],
    p_c_ttl_seconds     integer[],
    p_now               timestamptz DEFAULT NULL
)
RETURNS TABLE (
    admission      integer,     -- 1-based index into p_task_ids
    is_lease       boolean,     -- false: a window limit (p_w_*), true: a concurrency limit (p_c_*)
    ord            integer,     -- 1-based index into the p_w_* or p_c_* arrays
    fits           boolean,     -- whether this limit had room when its admission was decided
    grant_id       uuid,        -- the reservation or lease written; NULL when the admission was refused
    current_value  numeric,     -- window: used_value; concurrency: live lease total (before this admission)
    reserved_value numeric,     -- window: reserved_value before this admission; concurrency: 0
    window_start   timestamptz, -- window start; concurrency: db_now
    reset_at       timestamptz, -- window end; concurrency: the lease's expiry, or the earliest live expiry
    db_now         timestamptz, -- the database clock the decision used
    refusal        text         -- '' or why the whole admission was refused before any limit was looked at
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
-- Decides a batch of admissions, each all or nothing, in arrival order:
-- one entry per admission in p_task_ids and p_attempt_ids (NULL for none);
-- window limits in p_w_* and concurrency limits in p_c_*, grouped by
-- admission in admission order (p_w_admission and p_c_admission name each
-- limit's admission). Returns one row per limit. Refused admissions write
-- nothing, except that a counter row the batch found missing stays behind
-- with zero usage.
-- Locks: every distinct window counter row of the batch, once, in
-- primary-key order, by one upsert (which creates missing rows); then
-- pg_advisory_xact_lock on each distinct concurrency scope in lock-key
-- order; then inserts reservation and lease rows (FK key-share locks on
-- the task and attempt rows).
-- Index: gateway_rate_limit_counters_pkey (conflict arbiter and probes; updates by tuple id);
-- gateway_concurrency_leases_live_scope_idx (live leases of each scope);
-- pgadmit_task_refusal for task guards, and pgadmit_task_recheck once the
-- rows are written (a task finished meanwhile rolls the batch back).
-- Statements: 4 for a batch of one-window admissions that all fit (the
-- upsert takes each counter's whole amount at once), up to 9 otherwise,
-- whatever the batch size.
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    n_adm      integer := coalesce(cardinality(p_task_ids), 0);
    n_w        integer := coalesce(cardinality(p_w_scope_types), 0);
    n_c        integer := coalesce(cardinality(p_c_scope_types), 0);
    v_refusal  text[];
    v_admitted boolean[];
    a_limits   integer[];      -- per admission: how many limits it has
    -- per window limit
    w_slot     integer[];
    w_fits     boolean[];
    w_used     numeric[];
    w_reserved numeric[];
    w_id       uuid[];
    -- per distinct counter (slot), in lock order
    s_type     text[];
    s_key      text[];
    s_metric   text[];
    s_seconds  integer[];
    s_start    timestamptz[];
    s_used     numeric[];
    s_reserved numeric[];
    s_take     numeric[];      -- what the upsert adds: the whole batch's amount, or 0 (lock only)
    s_guard    numeric[];      -- the limit the upsert checks s_take against
    s_done     boolean[];      -- the upsert added s_take: every admission on it is admitted
    s_simple   boolean[];      -- every limit on it is its admission's only limit
    s_delta    numeric[];      -- what the decisions below add
    s_limit    numeric[];      -- the limit written on the row (the last one)
    n_s        integer := 0;
    v_slots    integer[];
    v_used     numeric[];
    v_reserved numeric[];
    -- per concurrency limit, and per distinct scope
    c_slot     integer[];
    c_fits     boolean[];
    c_active   numeric[];
    c_id       uuid[];
    t_active   numeric[];
    t_next     timestamptz[];
    v_ok       boolean;
    i          integer;
    j          integer;
    s          integer;
    wi         integer := 1;
    ci         integer := 1;
    w0         integer;
    c0         integer;
BEGIN
    -- Every per-limit array is filled to its full length up front: a
    -- PL/pgSQL array first assigned at element k starts at k.
    v_refusal := array_fill(''::text, ARRAY[n_adm]);
    v_admitted := array_fill(false, ARRAY[n_adm]);
    w_fits := array_fill(false, ARRAY[n_w]);
    w_used := array_fill(0::numeric, ARRAY[n_w]);
    w_reserved := array_fill(0::numeric, ARRAY[n_w]);
    w_id := array_fill(NULL::uuid, ARRAY[n_w]);
    c_fits := array_fill(false, ARRAY[n_c]);
    c_active := array_fill(0::numeric, ARRAY[n_c]);
    c_id := array_fill(NULL::uuid, ARRAY[n_c]);

    -- Reads are exact only in READ COMMITTED: each statement sees what the
    -- previous holder of a lock committed.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        v_refusal := array_fill('isolation'::text, ARRAY[n_adm]);
        n_w := 0;
        n_c := 0;
    END IF;
    FOR i IN 1 .. n_adm LOOP
        IF v_refusal[i] = '' AND (p_task_ids[i] IS NOT NULL OR p_attempt_ids[i] IS NOT NULL) THEN
            v_refusal[i] := pgadmit_task_refusal(p_task_ids[i], p_attempt_ids[i]);
        END IF;
    END LOOP;

    IF n_w > 0 THEN
        -- The distinct counters in lock order, and each limit's counter.
        WITH l AS (
            SELECT u.i, u.st, u.sk, u.m, u.ws,
                   dense_rank() OVER (ORDER BY u.st COLLATE "C", u.sk COLLATE "C", u.m COLLATE "C", u.ws)::integer AS slot
            FROM unnest(p_w_scope_types, p_w_scope_keys, p_w_metrics, p_w_window_seconds)
                 WITH ORDINALITY AS u(st, sk, m, ws, i)
        ),
        d AS (
            SELECT DISTINCT l.slot, l.st, l.sk, l.m, l.ws FROM l
        )
        SELECT (SELECT array_agg(l.slot ORDER BY l.i) FROM l),
               array_agg(d.st ORDER BY d.slot), array_agg(d.sk ORDER BY d.slot),
               array_agg(d.m ORDER BY d.slot), array_agg(d.ws ORDER BY d.slot)
        INTO w_slot, s_type, s_key, s_metric, s_seconds
        FROM d;
        n_s := cardinality(s_type);

        -- A counter whose every limit is its admission's only one (a batch
        -- of one-window admissions, the common shape) takes, when it fits,
        -- the whole of what the batch asks of it in the upsert below. The
        -- upsert checks that sum against the smallest of their limits,
        -- which is enough for every one of them to fit in arrival order.
        a_limits := array_fill(0, ARRAY[n_adm]);
        FOR i IN 1 .. n_w LOOP
            a_limits[p_w_admission[i]] := a_limits[p_w_admission[i]] + 1;
        END LOOP;
        FOR i IN 1 .. n_c LOOP
            a_limits[p_c_admission[i]] := a_limits[p_c_admission[i]] + 1;
        END LOOP;
        s_take := array_fill(0::numeric, ARRAY[n_s]);
        s_guard := array_fill(NULL::numeric, ARRAY[n_s]);
        s_simple := array_fill(true, ARRAY[n_s]);
        s_limit := array_fill(0::numeric, ARRAY[n_s]);
        s_start := array_fill(NULL::timestamptz, ARRAY[n_s]);
        FOR i IN 1 .. n_w LOOP
            s := w_slot[i];
            s_limit[s] := p_w_limits[i];
            IF a_limits[p_w_admission[i]] <> 1 THEN
                s_simple[s] := false;
            ELSIF v_refusal[p_w_admission[i]] = '' THEN
                s_take[s] := s_take[s] + p_w_amounts[i];
                s_guard[s] := least(s_guard[s], p_w_limits[i]);
            END IF;
        END LOOP;
        FOR s IN 1 .. n_s LOOP
            s_start[s] := date_bin(make_interval(secs => s_seconds[s]), v_now, timestamptz 'epoch');
            IF NOT s_simple[s] OR s_take[s] > s_guard[s] THEN
                s_take[s] := 0;
            END IF;
            IF s_take[s] = 0 THEN
                s_guard[s] := s_limit[s];
            END IF;
        END LOOP;

        -- One upsert locks every counter in lock order (inserting missing
        -- ones) and adds s_take where it fits; a row it only locked (s_take
        -- 0, or not fitting) it leaves unchanged.
        WITH up AS (
            INSERT INTO gateway_rate_limit_counters AS c (
                scope_type, scope_key, metric, window_seconds, window_start, reset_at,
                limit_value, reserved_value, created_at, updated_at
            )
            SELECT u.st, u.sk, u.m, u.ws, u.wst, u.wst + make_interval(secs => u.ws),
                   u.guard, u.take, v_now, v_now
            FROM unnest(s_type, s_key, s_metric, s_seconds, s_start, s_guard, s_take)
                 WITH ORDINALITY AS u(st, sk, m, ws, wst, guard, take, slot)
            ORDER BY u.slot
            ON CONFLICT ON CONSTRAINT gateway_rate_limit_counters_pkey DO UPDATE
            SET reserved_value = c.reserved_value + excluded.reserved_value,
                limit_value = excluded.limit_value,
                updated_at = excluded.updated_at
            WHERE excluded.reserved_value > 0
              AND c.used_value + c.reserved_value + excluded.reserved_value <= excluded.limit_value
            RETURNING c.scope_type, c.scope_key, c.metric, c.window_seconds, c.used_value, c.reserved_value
        )
        SELECT array_agg(k.slot::integer), array_agg(up.used_value), array_agg(up.reserved_value)
        INTO v_slots, v_used, v_reserved
        FROM up
        JOIN unnest(s_type, s_key, s_metric, s_seconds) WITH ORDINALITY AS k(st, sk, m, ws, slot)
          ON k.st = up.scope_type AND k.sk = up.scope_key AND k.m = up.metric AND k.ws = up.window_seconds;

        s_done := array_fill(false, ARRAY[n_s]);
        s_used := array_fill(NULL::numeric, ARRAY[n_s]);
        s_reserved := array_fill(NULL::numeric, ARRAY[n_s]);
        FOR j IN 1 .. coalesce(cardinality(v_slots), 0) LOOP
            s := v_slots[j];
            s_done[s] := s_take[s] > 0;
            s_used[s] := v_used[j];
            s_reserved[s] := v_reserved[j] - s_take[s]; -- before this batch
        END LOOP;
        -- The rows it only locked: read them (their lock is ours, so this
        -- reads what the decision below may rely on).
        IF NOT (true = ALL(s_done)) THEN
            SELECT array_agg(k.slot::integer), array_agg(c.used_value), array_agg(c.reserved_value)
            INTO v_slots, v_used, v_reserved
            FROM unnest(s_type, s_key, s_metric, s_seconds, s_start, s_done)
                 WITH ORDINALITY AS k(st, sk, m, ws, wst, done, slot)
            CROSS JOIN LATERAL (
                SELECT x.used_value, x.reserved_value
                FROM gateway_rate_limit_counters AS x
                WHERE x.scope_type = k.st AND x.scope_key = k.sk AND x.metric = k.m
                  AND x.window_seconds = k.ws AND x.window_start = k.wst
                LIMIT 1
            ) AS c
            WHERE NOT k.done;
            FOR j IN 1 .. coalesce(cardinality(v_slots), 0) LOOP
                s_used[v_slots[j]] := v_used[j];
                s_reserved[v_slots[j]] := v_reserved[j];
            END LOOP;
        END IF;
        s_delta := array_fill(0::numeric, ARRAY[n_s]);
    END IF;

    IF n_c > 0 THEN
        -- One advisory lock per concurrency scope, in lock-key order; then,
        -- in a statement that sees what the previous holders committed, the
        -- live leases of each scope.
        PERFORM pg_advisory_xact_lock(s.lock_key)
        FROM (
            SELECT DISTINCT hashtextextended(
                       'pgadmit/concurrent/' || length(u.st)::text || ':' || u.st || '/' || u.sk, 0) AS lock_key
            FROM unnest(p_c_scope_types, p_c_scope_keys) AS u(st, sk)
            ORDER BY lock_key
        ) AS s
        ORDER BY s.lock_key;
        WITH l AS (
            SELECT u.i, u.st, u.sk,
                   dense_rank() OVER (ORDER BY u.st COLLATE "C", u.sk COLLATE "C")::integer AS slot
            FROM unnest(p_c_scope_types, p_c_scope_keys) WITH ORDINALITY AS u(st, sk, i)
        ),
        d AS (
            SELECT DISTINCT l.slot, l.st, l.sk FROM l
        )
        SELECT (SELECT array_agg(l.slot ORDER BY l.i) FROM l),
               array_agg(live.active ORDER BY d.slot), array_agg(live.next_expiry ORDER BY d.slot)
        INTO c_slot, t_active, t_next
        FROM d
        CROSS JOIN LATERAL (
            SELECT coalesce(sum(x.lease_value), 0) AS active, min(x.expires_at) AS next_expiry
            FROM gateway_concurrency_leases AS x
            WHERE x.scope_type = d.st AND x.scope_key = d.sk
              AND x.released_at IS NULL AND x.expires_at > v_now
        ) AS live;
    END IF;

    -- Decide each admission in arrival order against running totals: an
    -- admitted one counts for those after it. On a counter whose upsert
    -- took the whole batch's amount, every admission was admitted.
    FOR i IN 1 .. n_adm LOOP
        w0 := wi;
        WHILE wi <= n_w AND p_w_admission[wi] = i LOOP
            wi := wi + 1;
        END LOOP;
        c0 := ci;
        WHILE ci <= n_c AND p_c_admission[ci] = i LOOP
            ci := ci + 1;
        END LOOP;
        v_ok := v_refusal[i] = '';
        FOR j IN w0 .. wi - 1 LOOP
            s := w_slot[j];
            w_used[j] := s_used[s];
            w_reserved[j] := s_reserved[s];
            w_fits[j] := s_done[s] OR s_used[s] + s_reserved[s] + p_w_amounts[j] <= p_w_limits[j];
            v_ok := v_ok AND w_fits[j];
        END LOOP;
        FOR j IN c0 .. ci - 1 LOOP
            c_active[j] := t_active[c_slot[j]];
            c_fits[j] := c_active[j] + p_c_amounts[j] <= p_c_limits[j];
            v_ok := v_ok AND c_fits[j];
        END LOOP;
        IF v_ok THEN
            v_admitted[i] := true;
            FOR j IN w0 .. wi - 1 LOOP
                s := w_slot[j];
                s_reserved[s] := s_reserved[s] + p_w_amounts[j];
                IF NOT s_done[s] THEN
                    s_delta[s] := s_delta[s] + p_w_amounts[j];
                END IF;
                w_id[j] := pgadmit_uuidv7();
            END LOOP;
            FOR j IN c0 .. ci - 1 LOOP
                t_active[c_slot[j]] := t_active[c_slot[j]] + p_c_amounts[j];
                c_id[j] := pgadmit_uuidv7();
            END LOOP;
        END IF;
    END LOOP;

    -- Write what was admitted: the counters the upsert did not add to, then
    -- the ledger rows.
    IF n_w > 0 AND NOT (0 = ALL(s_delta)) THEN
        -- Each row found by its primary key (LATERAL: one probe per
        -- counter), then updated by tuple id. A join of the counters with
        -- the arrays could be turned around, into a scan of every counter,
        -- once the statistics say the table is small (a VACUUM while it
        -- was): the arrays are guessed at 100 rows.
        UPDATE gateway_rate_limit_counters AS c
        SET reserved_value = c.reserved_value + k.delta,
            limit_value = k.lim,
            updated_at = v_now
        FROM (
            SELECT x.tid, u.delta, u.lim
            FROM unnest(s_type, s_key, s_metric, s_seconds, s_start, s_delta, s_limit)
                 AS u(st, sk, m, ws, wst, delta, lim)
            CROSS JOIN LATERAL (
                SELECT r.ctid AS tid
                FROM gateway_rate_limit_counters AS r
                WHERE r.scope_type = u.st AND r.scope_key = u.sk AND r.metric = u.m
                  AND r.window_seconds = u.ws AND r.window_start = u.wst
                LIMIT 1
            ) AS x
            WHERE u.delta > 0
        ) AS k
        WHERE c.ctid = k.tid;
    END IF;
    IF n_w > 0 AND true = ANY(v_admitted) THEN
        INSERT INTO gateway_rate_limit_reservations (
            id, task_id, attempt_id, scope_type, scope_key, metric, window_seconds, window_start,
            limit_value, reserved_amount, created_at, updated_at
        )
        SELECT u.id, p_task_ids[u.adm], p_attempt_ids[u.adm], u.st, u.sk, u.m, u.ws, s_start[u.slot],
               u.lim, u.amount, v_now, v_now
        FROM unnest(w_id, p_w_admission, w_slot, p_w_scope_types, p_w_scope_keys, p_w_metrics,
                    p_w_window_seconds, p_w_limits, p_w_amounts)
             AS u(id, adm, slot, st, sk, m, ws, lim, amount)
        WHERE u.id IS NOT NULL;
    END IF;
    IF n_c > 0 AND true = ANY(v_admitted) THEN
        INSERT INTO gateway_concurrency_leases (
            id, task_id, attempt_id, scope_type, scope_key, lease_value, limit_value, expires_at, created_at
        )
        SELECT u.id, p_task_ids[u.adm], p_attempt_ids[u.adm], u.st, u.sk, u.amount, u.lim,
               v_now + make_interval(secs => u.ttl), v_now
        FROM unnest(c_id, p_c_admission, p_c_scope_types, p_c_scope_keys, p_c_limits, p_c_amounts, p_c_ttl_seconds)
             AS u(id, adm, st, sk, lim, amount, ttl)
        WHERE u.id IS NOT NULL;
    END IF;
    -- The tasks of admitted admissions checked again, now that the inserts
    -- above hold their rows (pgadmit_task_recheck).
    IF true = ANY(v_admitted) AND (cardinality(array_remove(p_task_ids, NULL)) > 0
                                   OR cardinality(array_remove(p_attempt_ids, NULL)) > 0) THEN
        PERFORM pgadmit_task_recheck(p_task_ids, p_attempt_ids, v_admitted);
    END IF;

    RETURN QUERY
    SELECT u.adm, false, u.i::integer, u.fits, u.id, u.used, u.reserved,
           date_bin(make_interval(secs => u.ws), v_now, timestamptz 'epoch'),
           date_bin(make_interval(secs => u.ws), v_now, timestamptz 'epoch') + make_interval(secs => u.ws),
           v_now, v_refusal[u.adm]
    FROM unnest(p_w_admission, p_w_window_seconds, w_fits, w_id, w_used, w_reserved)
         WITH ORDINALITY AS u(adm, ws, fits, id, used, reserved, i)
    UNION ALL
    SELECT u.adm, true, u.i::integer, u.fits, u.id, u.active, 0::numeric, v_now,
           CASE WHEN u.id IS NOT NULL THEN v_now + make_interval(secs => u.ttl)
                ELSE coalesce(t_next[c_slot[u.i]], v_now + make_interval(secs => u.ttl)) END,
           v_now, v_refusal[u.adm]
    FROM unnest(p_c_admission, p_c_ttl_seconds, c_fits, c_id, c_active)
         WITH ORDINALITY AS u(adm, ttl, fits, id, active, i);
END;
$$;
-- +goose StatementEnd
