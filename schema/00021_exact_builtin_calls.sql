-- Every call in pgadmit's functions of a function or operator of
-- PostgreSQL's names pg_catalog's exactly, without a SET clause.
--
-- The functions resolve what they call through their caller's search_path.
-- An earlier 00021 pinned it with SET search_path and was reverted: a
-- setting is saved and restored on each call, and a SQL function that has
-- one is not inlined (10-23 % of admissions per second). pg_catalog is searched first,
-- but a function or operator of another schema on the path whose argument
-- types match a call exactly wins over pg_catalog's when pg_catalog's needs
-- a cast or is polymorphic (anyarray, anyelement): a role that may create
-- in such a schema (public, before PostgreSQL 15) ran its code as every
-- caller. Such calls now name pg_catalog (pg_catalog.fn(...),
-- OPERATOR(pg_catalog.<@)) or cast an integer literal to the type of the
-- other operand, so that pg_catalog's operator matches exactly. The same
-- functions and operators run as before: plans, volatility and settings
-- are unchanged, and pgadmit_uuidv7 and pgadmit_task_fence_key are still
-- inlined. TestFunctionsIgnoreLookalikesOutsideTheirSchema plants a
-- lookalike of every call changed here.
--
-- Audit of the latest definition of each function (A: changed here).
--   pgadmit_uuidv7 (00002, SQL): A set_bit(bytea, integer, integer)
--     [pg_catalog: bytea, bigint, integer]; A numeric * integer (extract
--     returns numeric; operator is numeric * numeric). Exact: uuid_send(uuid),
--     gen_random_uuid(), int8send(bigint), clock_timestamp(), encode(bytea,
--     'hex'). overlay, substring and extract are SQL syntax, always
--     pg_catalog's.
--   pgadmit_task_fence_key (00020, SQL): A hashtextextended(text, integer)
--     [text, bigint]. Exact: unknown || text.
--   pgadmit_task_recheck (00020): A cardinality(uuid[]) [anyarray]. Exact:
--     pg_advisory_xact_lock_shared(bigint), pgadmit_task_fence_key(uuid),
--     pgadmit_task_refusal(uuid, uuid), unnest of several arrays (expanded
--     by the parser as pg_catalog.unnest of each), = and <> on like types.
--   pgadmit_reserve (00018): A make_interval(secs => integer) [double
--     precision]; A hashtextextended(text, integer); A array_agg, array_fill,
--     cardinality, array_remove (polymorphic); A numeric > integer, numeric =
--     integer, integer = ALL(numeric[]) (literal 0). Exact: now(),
--     clock_timestamp(), current_setting('...') (a literal resolves to
--     text), date_bin(interval, timestamptz, timestamptz), length(text),
--     pg_advisory_xact_lock(bigint), sum(numeric), min(timestamptz),
--     dense_rank(), pgadmit_task_refusal, pgadmit_task_recheck,
--     pgadmit_uuidv7, multi-array unnest, || and comparisons on like types.
--   pgadmit_reserve_one (00011): A make_interval(secs => integer). Exact:
--     now(), current_setting, date_bin, pgadmit_task_refusal,
--     pgadmit_task_recheck(uuid[], uuid[], boolean[]), operators on like types.
--   pgadmit_reserve_windows (00007): A make_interval(secs => integer); A
--     array_agg, array_fill, cardinality; A numeric > integer; A
--     pgadmit_reserve(..., '{}', ...) (a lookalike taking text where it
--     takes an array won on the literals: they are cast). Exact: now(),
--     current_setting, date_bin, sum(numeric), min(numeric),
--     generate_series(integer, integer), pgadmit_uuidv7, multi-array unnest.
--   pgadmit_renew_leases (00017): A make_interval(secs => integer). Exact:
--     clock_timestamp(), multi-array unnest, timestamptz + interval.
--   pgadmit_settle (00016): A unnest(uuid[]), array_agg, cardinality
--     (polymorphic); A text[] <@ text[] [anyarray <@ anyarray]. Exact: now(),
--     nullif (= on text), sum(numeric), row_number() = integer (bigint =
--     integer), pgadmit_lock_counters, multi-array unnest.
--   pgadmit_allot (00013): A make_interval(secs => integer); A numeric /
--     integer, numeric > integer. Exact: now(), date_bin, trunc(numeric,
--     integer); greatest, least and coalesce are SQL syntax.
--   pgadmit_allot_return (00019): A unnest(uuid[]), array_agg. Exact: now(),
--     nullif, sum(numeric), pgadmit_lock_counters, = ANY(uuid[]).
--   Unchanged, every call exact: pgadmit_lock_counters (00003: multi-array
--     unnest, comparisons on like types), pgadmit_settle_one (00014: now(),
--     nullif, NOT IN on text), pgadmit_task_refusal (00003: comparisons on
--     text and uuid), pgadmit_hot_commit (00012: set_config and
--     pg_logical_emit_message take text where it passes literals).
--
-- A later migration that redefines one of these functions keeps their
-- calls exact: the test above runs on the latest schema. Calls of
-- pgadmit's own functions cannot name their schema (it is the migrating
-- session's); their arguments match them exactly. Tables and pgadmit's own
-- functions are still found through the caller's search_path: pgadmit's
-- schema must come first on it (README).
--
-- CREATE OR REPLACE FUNCTION takes no lock that a running call holds: this
-- applies at once under traffic. Down restores the previous definitions.

-- +goose Up
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_uuidv7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    -- 48 bits of Unix milliseconds, then the version, variant and random
    -- bits of a random UUID (version bits 0100 become 0111).
    SELECT encode(
        pg_catalog.set_bit(pg_catalog.set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000::numeric)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_task_fence_key(p_task_id uuid)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT pg_catalog.hashtextextended('pgadmit/task/' || p_task_id::text, 0)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_task_recheck(p_task_ids uuid[], p_attempt_ids uuid[], p_admitted boolean[])
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
-- Raises SQLSTATE P0T01, rolling the statement back, when the task or
-- attempt of an admission that pgadmit_reserve or pgadmit_reserve_one has
-- just written (p_admitted[i]) no longer takes capacity
-- (pgadmit_task_refusal). Called once the admission's rows are inserted.
-- First takes each admitted task's fence shared (pgadmit_task_fence_key,
-- in key order), which FinishTask and CancelTask take exclusively once
-- they hold the task row: a finish that took it first is waited for, and
-- is seen here, finished; one that comes later waits for this
-- transaction's commit, and then settles what it wrote. The reads below
-- come after the lock, each with a snapshot of its own (VOLATILE).
-- Locks: pg_advisory_xact_lock_shared on each admitted task's fence key.
-- Index: gateway_tasks_pkey; gateway_task_attempts_pkey.
DECLARE
    v_refusal text;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(f.fence_key)
    FROM (
        SELECT DISTINCT pgadmit_task_fence_key(u.task_id) AS fence_key
        FROM unnest(p_task_ids, p_admitted) AS u(task_id, admitted)
        WHERE u.admitted AND u.task_id IS NOT NULL
    ) AS f
    ORDER BY f.fence_key;
    FOR i IN 1 .. coalesce(pg_catalog.cardinality(p_task_ids), 0) LOOP
        IF p_admitted[i] AND (p_task_ids[i] IS NOT NULL OR p_attempt_ids[i] IS NOT NULL) THEN
            v_refusal := pgadmit_task_refusal(p_task_ids[i], p_attempt_ids[i]);
            IF v_refusal <> '' THEN
                RAISE EXCEPTION 'pgadmit: task % (attempt %): % while the admission was decided',
                    p_task_ids[i], p_attempt_ids[i], v_refusal
                    USING ERRCODE = 'P0T01';
            END IF;
        END IF;
    END LOOP;
END;
$$;
-- +goose StatementEnd

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
    n_adm      integer := coalesce(pg_catalog.cardinality(p_task_ids), 0);
    n_w        integer := coalesce(pg_catalog.cardinality(p_w_scope_types), 0);
    n_c        integer := coalesce(pg_catalog.cardinality(p_c_scope_types), 0);
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
    v_refusal := pg_catalog.array_fill(''::text, ARRAY[n_adm]);
    v_admitted := pg_catalog.array_fill(false, ARRAY[n_adm]);
    w_fits := pg_catalog.array_fill(false, ARRAY[n_w]);
    w_used := pg_catalog.array_fill(0::numeric, ARRAY[n_w]);
    w_reserved := pg_catalog.array_fill(0::numeric, ARRAY[n_w]);
    w_id := pg_catalog.array_fill(NULL::uuid, ARRAY[n_w]);
    c_fits := pg_catalog.array_fill(false, ARRAY[n_c]);
    c_active := pg_catalog.array_fill(0::numeric, ARRAY[n_c]);
    c_id := pg_catalog.array_fill(NULL::uuid, ARRAY[n_c]);

    -- Reads are exact only in READ COMMITTED: each statement sees what the
    -- previous holder of a lock committed.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        v_refusal := pg_catalog.array_fill('isolation'::text, ARRAY[n_adm]);
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
        SELECT (SELECT pg_catalog.array_agg(l.slot ORDER BY l.i) FROM l),
               pg_catalog.array_agg(d.st ORDER BY d.slot), pg_catalog.array_agg(d.sk ORDER BY d.slot),
               pg_catalog.array_agg(d.m ORDER BY d.slot), pg_catalog.array_agg(d.ws ORDER BY d.slot)
        INTO w_slot, s_type, s_key, s_metric, s_seconds
        FROM d;
        n_s := pg_catalog.cardinality(s_type);

        -- A counter whose every limit is its admission's only one (a batch
        -- of one-window admissions, the common shape) takes, when it fits,
        -- the whole of what the batch asks of it in the upsert below. The
        -- upsert checks that sum against the smallest of their limits,
        -- which is enough for every one of them to fit in arrival order.
        a_limits := pg_catalog.array_fill(0, ARRAY[n_adm]);
        FOR i IN 1 .. n_w LOOP
            a_limits[p_w_admission[i]] := a_limits[p_w_admission[i]] + 1;
        END LOOP;
        FOR i IN 1 .. n_c LOOP
            a_limits[p_c_admission[i]] := a_limits[p_c_admission[i]] + 1;
        END LOOP;
        s_take := pg_catalog.array_fill(0::numeric, ARRAY[n_s]);
        s_guard := pg_catalog.array_fill(NULL::numeric, ARRAY[n_s]);
        s_simple := pg_catalog.array_fill(true, ARRAY[n_s]);
        s_limit := pg_catalog.array_fill(0::numeric, ARRAY[n_s]);
        s_start := pg_catalog.array_fill(NULL::timestamptz, ARRAY[n_s]);
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
            s_start[s] := date_bin(pg_catalog.make_interval(secs => s_seconds[s]), v_now, timestamptz 'epoch');
            IF NOT s_simple[s] OR s_take[s] > s_guard[s] THEN
                s_take[s] := 0;
            END IF;
            IF s_take[s] = 0::numeric THEN
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
            SELECT u.st, u.sk, u.m, u.ws, u.wst, u.wst + pg_catalog.make_interval(secs => u.ws),
                   u.guard, u.take, v_now, v_now
            FROM unnest(s_type, s_key, s_metric, s_seconds, s_start, s_guard, s_take)
                 WITH ORDINALITY AS u(st, sk, m, ws, wst, guard, take, slot)
            ORDER BY u.slot
            ON CONFLICT ON CONSTRAINT gateway_rate_limit_counters_pkey DO UPDATE
            SET reserved_value = c.reserved_value + excluded.reserved_value,
                limit_value = excluded.limit_value,
                updated_at = excluded.updated_at
            WHERE excluded.reserved_value > 0::numeric
              AND c.used_value + c.reserved_value + excluded.reserved_value <= excluded.limit_value
            RETURNING c.scope_type, c.scope_key, c.metric, c.window_seconds, c.used_value, c.reserved_value
        )
        SELECT pg_catalog.array_agg(k.slot::integer), pg_catalog.array_agg(up.used_value), pg_catalog.array_agg(up.reserved_value)
        INTO v_slots, v_used, v_reserved
        FROM up
        JOIN unnest(s_type, s_key, s_metric, s_seconds) WITH ORDINALITY AS k(st, sk, m, ws, slot)
          ON k.st = up.scope_type AND k.sk = up.scope_key AND k.m = up.metric AND k.ws = up.window_seconds;

        s_done := pg_catalog.array_fill(false, ARRAY[n_s]);
        s_used := pg_catalog.array_fill(NULL::numeric, ARRAY[n_s]);
        s_reserved := pg_catalog.array_fill(NULL::numeric, ARRAY[n_s]);
        FOR j IN 1 .. coalesce(pg_catalog.cardinality(v_slots), 0) LOOP
            s := v_slots[j];
            s_done[s] := s_take[s] > 0::numeric;
            s_used[s] := v_used[j];
            s_reserved[s] := v_reserved[j] - s_take[s]; -- before this batch
        END LOOP;
        -- The rows it only locked: read them (their lock is ours, so this
        -- reads what the decision below may rely on).
        IF NOT (true = ALL(s_done)) THEN
            SELECT pg_catalog.array_agg(k.slot::integer), pg_catalog.array_agg(c.used_value), pg_catalog.array_agg(c.reserved_value)
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
            FOR j IN 1 .. coalesce(pg_catalog.cardinality(v_slots), 0) LOOP
                s_used[v_slots[j]] := v_used[j];
                s_reserved[v_slots[j]] := v_reserved[j];
            END LOOP;
        END IF;
        s_delta := pg_catalog.array_fill(0::numeric, ARRAY[n_s]);
    END IF;

    IF n_c > 0 THEN
        -- One advisory lock per concurrency scope, in lock-key order; then,
        -- in a statement that sees what the previous holders committed, the
        -- live leases of each scope.
        PERFORM pg_advisory_xact_lock(s.lock_key)
        FROM (
            SELECT DISTINCT pg_catalog.hashtextextended(
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
        SELECT (SELECT pg_catalog.array_agg(l.slot ORDER BY l.i) FROM l),
               pg_catalog.array_agg(live.active ORDER BY d.slot), pg_catalog.array_agg(live.next_expiry ORDER BY d.slot)
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
    IF n_w > 0 AND NOT (0::numeric = ALL(s_delta)) THEN
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
            WHERE u.delta > 0::numeric
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
               v_lease_now + pg_catalog.make_interval(secs => u.ttl), v_now
        FROM unnest(c_id, p_c_admission, p_c_scope_types, p_c_scope_keys, p_c_limits, p_c_amounts, p_c_ttl_seconds)
             AS u(id, adm, st, sk, lim, amount, ttl)
        WHERE u.id IS NOT NULL;
    END IF;
    -- The tasks of admitted admissions checked again, now that the inserts
    -- above hold their rows (pgadmit_task_recheck).
    IF true = ANY(v_admitted) AND (pg_catalog.cardinality(pg_catalog.array_remove(p_task_ids, NULL)) > 0
                                   OR pg_catalog.cardinality(pg_catalog.array_remove(p_attempt_ids, NULL)) > 0) THEN
        PERFORM pgadmit_task_recheck(p_task_ids, p_attempt_ids, v_admitted);
    END IF;

    RETURN QUERY
    SELECT u.adm, false, u.i::integer, u.fits, u.id, u.used, u.reserved,
           date_bin(pg_catalog.make_interval(secs => u.ws), v_now, timestamptz 'epoch'),
           date_bin(pg_catalog.make_interval(secs => u.ws), v_now, timestamptz 'epoch') + pg_catalog.make_interval(secs => u.ws),
           v_now, v_refusal[u.adm]
    FROM unnest(p_w_admission, p_w_window_seconds, w_fits, w_id, w_used, w_reserved)
         WITH ORDINALITY AS u(adm, ws, fits, id, used, reserved, i)
    UNION ALL
    SELECT u.adm, true, u.i::integer, u.fits, u.id, u.active, 0::numeric, v_now,
           CASE WHEN u.id IS NOT NULL THEN v_lease_now + pg_catalog.make_interval(secs => u.ttl)
                ELSE coalesce(t_next[c_slot[u.i]], v_lease_now + pg_catalog.make_interval(secs => u.ttl)) END,
           v_now, v_refusal[u.adm]
    FROM unnest(p_c_admission, p_c_ttl_seconds, c_fits, c_id, c_active)
         WITH ORDINALITY AS u(adm, ttl, fits, id, active, i);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_reserve_one(
    p_task_id        uuid,
    p_attempt_id     uuid,
    p_scope_type     text,
    p_scope_key      text,
    p_metric         text,
    p_window_seconds integer,
    p_limit          numeric,
    p_amount         numeric,
    p_now            timestamptz DEFAULT NULL
)
RETURNS TABLE (
    fits           boolean,     -- whether the amount fit
    grant_id       uuid,        -- the reservation written; NULL when refused
    current_value  numeric,     -- the window's used_value before this admission
    reserved_value numeric,     -- the window's reserved_value before this admission
    window_start   timestamptz,
    reset_at       timestamptz,
    db_now         timestamptz, -- the database clock the decision used
    refusal        text         -- '' or why the admission was refused before the limit was looked at
)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
-- One admission of one window limit. One statement takes the lock, decides
-- and writes: an upsert that creates the window's counter row with the
-- amount (it fits an empty window), or locks the existing row and adds the
-- amount only when it fits, then inserts the reservation.
-- Locks: the counter row (FOR UPDATE, by the upsert), then the new
-- reservation row (FK key-share locks on the task and attempt rows).
-- Index: gateway_rate_limit_counters_pkey (conflict arbiter);
-- pgadmit_task_refusal for the task guard, and pgadmit_task_recheck once
-- the reservation is written (a task finished meanwhile rolls it back).
-- A refusal writes nothing (when the amount did not fit, the upsert only
-- locked the row it read).
DECLARE
    v_now   timestamptz := coalesce(p_now, now());
    v_start timestamptz;
BEGIN
    db_now := v_now;
    v_start := date_bin(pg_catalog.make_interval(secs => p_window_seconds), v_now, timestamptz 'epoch');
    window_start := v_start;
    reset_at := v_start + pg_catalog.make_interval(secs => p_window_seconds);
    refusal := '';
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        -- Reads are exact only in READ COMMITTED: each statement sees what
        -- the previous holder of a lock committed.
        refusal := 'isolation';
    ELSIF p_task_id IS NOT NULL OR p_attempt_id IS NOT NULL THEN
        refusal := pgadmit_task_refusal(p_task_id, p_attempt_id);
    END IF;
    fits := false;
    IF refusal = '' AND p_amount <= p_limit THEN
        WITH counter AS (
            INSERT INTO gateway_rate_limit_counters AS c (
                scope_type, scope_key, metric, window_seconds, window_start, reset_at,
                limit_value, reserved_value, created_at, updated_at
            )
            VALUES (p_scope_type, p_scope_key, p_metric, p_window_seconds, v_start,
                    v_start + pg_catalog.make_interval(secs => p_window_seconds), p_limit, p_amount, v_now, v_now)
            ON CONFLICT ON CONSTRAINT gateway_rate_limit_counters_pkey DO UPDATE
            SET reserved_value = c.reserved_value + excluded.reserved_value,
                limit_value = excluded.limit_value,
                updated_at = excluded.updated_at
            WHERE c.used_value + c.reserved_value + excluded.reserved_value <= excluded.limit_value
            RETURNING c.used_value, c.reserved_value - p_amount AS reserved_before
        ),
        reservation AS (
            INSERT INTO gateway_rate_limit_reservations (
                task_id, attempt_id, scope_type, scope_key, metric, window_seconds, window_start,
                limit_value, reserved_amount, created_at, updated_at
            )
            SELECT p_task_id, p_attempt_id, p_scope_type, p_scope_key, p_metric, p_window_seconds, v_start,
                   p_limit, p_amount, v_now, v_now
            FROM counter
            RETURNING gateway_rate_limit_reservations.id
        )
        SELECT reservation.id, counter.used_value, counter.reserved_before
        INTO grant_id, current_value, reserved_value
        FROM counter, reservation;
        fits := FOUND;
    END IF;
    IF NOT fits THEN
        -- Explain the refusal. When the upsert found the amount did not fit,
        -- it left the row locked: this reads what it saw.
        SELECT c.used_value, c.reserved_value INTO current_value, reserved_value
        FROM gateway_rate_limit_counters AS c
        WHERE c.scope_type = p_scope_type AND c.scope_key = p_scope_key AND c.metric = p_metric
          AND c.window_seconds = p_window_seconds AND c.window_start = v_start;
        current_value := coalesce(current_value, 0);
        reserved_value := coalesce(reserved_value, 0);
        fits := current_value + reserved_value + p_amount <= p_limit;
        grant_id := NULL;
    END IF;
    IF grant_id IS NOT NULL AND (p_task_id IS NOT NULL OR p_attempt_id IS NOT NULL) THEN
        -- The task checked again, now that the reservation's insert holds
        -- its row (pgadmit_task_recheck).
        PERFORM pgadmit_task_recheck(ARRAY[p_task_id], ARRAY[p_attempt_id], ARRAY[true]);
    END IF;
    RETURN NEXT;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_reserve_windows(
    p_scope_types    text[],
    p_scope_keys     text[],
    p_metrics        text[],
    p_window_seconds integer[],
    p_limits         numeric[],
    p_amounts        numeric[]
)
RETURNS TABLE (
    admission      integer,     -- 1-based index into the arrays (one admission per element)
    is_lease       boolean,     -- always false: the rows of pgadmit_reserve, which this may call
    ord            integer,     -- equal to admission
    fits           boolean,     -- whether the amount fit when the admission was decided
    grant_id       uuid,        -- the reservation written; NULL when refused
    current_value  numeric,     -- used_value of the window before this admission
    reserved_value numeric,     -- reserved_value of the window before this admission
    window_start   timestamptz,
    reset_at       timestamptz,
    db_now         timestamptz, -- the database clock the decision used
    refusal        text         -- '' or why the admission was refused before its limit was looked at
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
-- Decides a batch of task-less admissions of one window limit each, in
-- arrival order, as pgadmit_reserve would: element i of the arrays is
-- admission i. Returns one row per admission.
-- One statement sums what the batch asks of each counter and, in one
-- upsert, adds the sum to every counter it fits whole (creating missing
-- rows): every admission on such a counter is admitted, and its
-- reservation is written by the same statement. The admissions on a counter
-- where the sum does not fit are then decided one by one, against a
-- running total, by pgadmit_reserve (in the same transaction, under the
-- locks already held). A refusal writes nothing, except that a counter row
-- the batch found missing stays behind with zero usage.
-- Locks: every distinct counter row of the batch, once, in primary-key order
-- (the lock order), by the upsert; then the new reservation rows.
-- Index: gateway_rate_limit_counters_pkey (conflict arbiter);
-- gateway_rate_limit_reservations_pkey and the table's other indexes (inserts).
-- Statements: 2 when every counter takes its sum (the usual case with room
-- left), whatever the batch size; otherwise those of pgadmit_reserve too.
DECLARE
    v_now      timestamptz := now();
    n          integer := coalesce(pg_catalog.cardinality(p_scope_types), 0);
    d_adm      integer[];  -- the admissions the upsert admitted, and what they saw
    d_id       uuid[];
    d_used     numeric[];
    d_reserved numeric[];
    v_rest     integer[];  -- the admissions left to pgadmit_reserve, and their limits
    r_types    text[];
    r_keys     text[];
    r_metrics  text[];
    r_seconds  integer[];
    r_limits   numeric[];
    r_amounts  numeric[];
BEGIN
    -- Reads are exact only in READ COMMITTED; pgadmit_reserve refuses the
    -- whole batch otherwise.
    IF current_setting('transaction_isolation') = 'read committed' THEN
        WITH input AS (
            SELECT u.i::integer AS i, u.st, u.sk, u.m, u.ws, u.lim, u.amount,
                   date_bin(pg_catalog.make_interval(secs => u.ws), v_now, timestamptz 'epoch') AS wst
            FROM unnest(p_scope_types, p_scope_keys, p_metrics, p_window_seconds, p_limits, p_amounts)
                 WITH ORDINALITY AS u(st, sk, m, ws, lim, amount, i)
        ),
        -- Per counter: the sum the batch asks, checked against the smallest
        -- of its limits (enough for each admission to fit in arrival
        -- order); 0 when it does not fit, so the upsert only locks the row
        -- (and a row it creates carries the last limit, as pgadmit_reserve
        -- writes it).
        wanted AS (
            SELECT input.st, input.sk, input.m, input.ws, input.wst,
                   CASE WHEN sum(input.amount) <= min(input.lim) THEN sum(input.amount) ELSE 0 END AS take,
                   CASE WHEN sum(input.amount) <= min(input.lim) THEN min(input.lim)
                        ELSE (pg_catalog.array_agg(input.lim ORDER BY input.i DESC))[1] END AS guard
            FROM input
            GROUP BY input.st, input.sk, input.m, input.ws, input.wst
        ),
        up AS (
            INSERT INTO gateway_rate_limit_counters AS c (
                scope_type, scope_key, metric, window_seconds, window_start, reset_at,
                limit_value, reserved_value, created_at, updated_at
            )
            SELECT w.st, w.sk, w.m, w.ws, w.wst, w.wst + pg_catalog.make_interval(secs => w.ws), w.guard, w.take, v_now, v_now
            FROM wanted AS w
            ORDER BY w.st COLLATE "C", w.sk COLLATE "C", w.m COLLATE "C", w.ws
            ON CONFLICT ON CONSTRAINT gateway_rate_limit_counters_pkey DO UPDATE
            SET reserved_value = c.reserved_value + excluded.reserved_value,
                limit_value = excluded.limit_value,
                updated_at = excluded.updated_at
            WHERE excluded.reserved_value > 0::numeric
              AND c.used_value + c.reserved_value + excluded.reserved_value <= excluded.limit_value
            RETURNING c.scope_type, c.scope_key, c.metric, c.window_seconds, c.used_value, c.reserved_value
        ),
        -- The admissions on counters that took their sum; each saw the
        -- counter as it was before the batch plus the admissions before it.
        admitted AS (
            SELECT input.i, pgadmit_uuidv7() AS id, input.st, input.sk, input.m, input.ws, input.wst,
                   input.lim, input.amount, up.used_value,
                   up.reserved_value - w.take - input.amount
                       + sum(input.amount) OVER (PARTITION BY input.st, input.sk, input.m, input.ws ORDER BY input.i)
                       AS reserved_before
            FROM up
            JOIN wanted AS w
              ON w.st = up.scope_type AND w.sk = up.scope_key AND w.m = up.metric AND w.ws = up.window_seconds
            JOIN input
              ON input.st = w.st AND input.sk = w.sk AND input.m = w.m AND input.ws = w.ws
            WHERE w.take > 0::numeric
        ),
        written AS (
            INSERT INTO gateway_rate_limit_reservations (
                id, scope_type, scope_key, metric, window_seconds, window_start,
                limit_value, reserved_amount, created_at, updated_at
            )
            SELECT a.id, a.st, a.sk, a.m, a.ws, a.wst, a.lim, a.amount, v_now, v_now
            FROM admitted AS a
        )
        SELECT pg_catalog.array_agg(a.i), pg_catalog.array_agg(a.id), pg_catalog.array_agg(a.used_value), pg_catalog.array_agg(a.reserved_before)
        INTO d_adm, d_id, d_used, d_reserved
        FROM admitted AS a;
    END IF;

    RETURN QUERY
    SELECT d.adm, false, d.adm, true, d.id, d.used, d.reserved,
           date_bin(pg_catalog.make_interval(secs => p_window_seconds[d.adm]), v_now, timestamptz 'epoch'),
           date_bin(pg_catalog.make_interval(secs => p_window_seconds[d.adm]), v_now, timestamptz 'epoch')
               + pg_catalog.make_interval(secs => p_window_seconds[d.adm]),
           v_now, ''::text
    FROM unnest(d_adm, d_id, d_used, d_reserved) AS d(adm, id, used, reserved);
    IF coalesce(pg_catalog.cardinality(d_adm), 0) = n THEN
        RETURN;
    END IF;

    -- The admissions left, in arrival order, and their limits.
    SELECT pg_catalog.array_agg(k ORDER BY k),
           pg_catalog.array_agg(p_scope_types[k] ORDER BY k), pg_catalog.array_agg(p_scope_keys[k] ORDER BY k),
           pg_catalog.array_agg(p_metrics[k] ORDER BY k), pg_catalog.array_agg(p_window_seconds[k] ORDER BY k),
           pg_catalog.array_agg(p_limits[k] ORDER BY k), pg_catalog.array_agg(p_amounts[k] ORDER BY k)
    INTO v_rest, r_types, r_keys, r_metrics, r_seconds, r_limits, r_amounts
    FROM generate_series(1, n) AS k
    WHERE k <> ALL(coalesce(d_adm, '{}'));
    RETURN QUERY
    SELECT v_rest[r.admission], r.is_lease, v_rest[r.ord], r.fits, r.grant_id, r.current_value, r.reserved_value,
           r.window_start, r.reset_at, r.db_now, r.refusal
    FROM pgadmit_reserve(
        pg_catalog.array_fill(NULL::uuid, ARRAY[pg_catalog.cardinality(v_rest)]), pg_catalog.array_fill(NULL::uuid, ARRAY[pg_catalog.cardinality(v_rest)]),
        ARRAY(SELECT generate_series(1, pg_catalog.cardinality(v_rest))),
        r_types, r_keys, r_metrics, r_seconds, r_limits, r_amounts,
        '{}'::integer[], '{}'::text[], '{}'::text[], '{}'::numeric[], '{}'::numeric[], '{}'::integer[], v_now
    ) AS r;
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
        SET expires_at = v_now + pg_catalog.make_interval(secs => v_ttl)
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
    n_r        integer := coalesce(pg_catalog.cardinality(p_reservation_ids), 0);
    k_type     text[] := p_scope_types;
    k_key      text[] := p_scope_keys;
    k_metric   text[] := p_metrics;
    k_seconds  integer[] := p_window_seconds;
    k_start    timestamptz[] := p_window_starts;
BEGIN
    IF n_r > 0 AND NOT (p_statuses OPERATOR(pg_catalog.<@) ARRAY['committed', 'released']) THEN
        RAISE EXCEPTION 'pgadmit_settle: every status must be committed or released'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n_r > 0 AND p_scope_types IS NULL THEN
        -- The counters of the reservations that are open now.
        SELECT pg_catalog.array_agg(r.scope_type), pg_catalog.array_agg(r.scope_key), pg_catalog.array_agg(r.metric),
               pg_catalog.array_agg(r.window_seconds), pg_catalog.array_agg(r.window_start)
        INTO k_type, k_key, k_metric, k_seconds, k_start
        FROM pg_catalog.unnest(p_reservation_ids) AS u(id)
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
    v_start   timestamptz := date_bin(pg_catalog.make_interval(secs => p_window_seconds), v_now, timestamptz 'epoch');
    v_trimmed numeric := 0;
    v_free    numeric;
    v_grant   numeric;
BEGIN
    window_start := v_start;
    reset_at := v_start + pg_catalog.make_interval(secs => p_window_seconds);
    db_now := v_now;
    -- Lock (or create, empty) the counter row.
    INSERT INTO gateway_rate_limit_counters AS c (
        scope_type, scope_key, metric, window_seconds, window_start, reset_at,
        limit_value, created_at, updated_at
    )
    VALUES (p_scope_type, p_scope_key, p_metric, p_window_seconds, v_start,
            v_start + pg_catalog.make_interval(secs => p_window_seconds), p_limit, v_now, v_now)
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
        v_grant := least(p_want, greatest(p_need, trunc(v_free / 2::numeric, 6)));
        v_grant := greatest(v_grant, p_need);
    END IF;
    IF v_grant > 0::numeric THEN
        INSERT INTO gateway_rate_limit_allotments AS a (
            holder, scope_type, scope_key, metric, window_seconds, window_start, expires_at,
            limit_value, granted, created_at, synced_at
        )
        VALUES (p_holder, p_scope_type, p_scope_key, p_metric, p_window_seconds, v_start,
                v_start + pg_catalog.make_interval(secs => p_window_seconds), p_limit, v_grant, v_now, v_now)
        RETURNING a.id INTO allotment_id;
    END IF;
    granted := v_grant;
    IF v_grant > 0::numeric OR v_trimmed > 0::numeric THEN
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
        pg_catalog.array_agg(a.scope_type), pg_catalog.array_agg(a.scope_key), pg_catalog.array_agg(a.metric),
        pg_catalog.array_agg(a.window_seconds), pg_catalog.array_agg(a.window_start))
    FROM pg_catalog.unnest(p_ids) AS u(id)
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

-- +goose Down
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_uuidv7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    -- 48 bits of Unix milliseconds, then the version, variant and random
    -- bits of a random UUID (version bits 0100 become 0111).
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_task_fence_key(p_task_id uuid)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtextextended('pgadmit/task/' || p_task_id::text, 0)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_task_recheck(p_task_ids uuid[], p_attempt_ids uuid[], p_admitted boolean[])
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
-- Raises SQLSTATE P0T01, rolling the statement back, when the task or
-- attempt of an admission that pgadmit_reserve or pgadmit_reserve_one has
-- just written (p_admitted[i]) no longer takes capacity
-- (pgadmit_task_refusal). Called once the admission's rows are inserted.
-- First takes each admitted task's fence shared (pgadmit_task_fence_key,
-- in key order), which FinishTask and CancelTask take exclusively once
-- they hold the task row: a finish that took it first is waited for, and
-- is seen here, finished; one that comes later waits for this
-- transaction's commit, and then settles what it wrote. The reads below
-- come after the lock, each with a snapshot of its own (VOLATILE).
-- Locks: pg_advisory_xact_lock_shared on each admitted task's fence key.
-- Index: gateway_tasks_pkey; gateway_task_attempts_pkey.
DECLARE
    v_refusal text;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(f.fence_key)
    FROM (
        SELECT DISTINCT pgadmit_task_fence_key(u.task_id) AS fence_key
        FROM unnest(p_task_ids, p_admitted) AS u(task_id, admitted)
        WHERE u.admitted AND u.task_id IS NOT NULL
    ) AS f
    ORDER BY f.fence_key;
    FOR i IN 1 .. coalesce(cardinality(p_task_ids), 0) LOOP
        IF p_admitted[i] AND (p_task_ids[i] IS NOT NULL OR p_attempt_ids[i] IS NOT NULL) THEN
            v_refusal := pgadmit_task_refusal(p_task_ids[i], p_attempt_ids[i]);
            IF v_refusal <> '' THEN
                RAISE EXCEPTION 'pgadmit: task % (attempt %): % while the admission was decided',
                    p_task_ids[i], p_attempt_ids[i], v_refusal
                    USING ERRCODE = 'P0T01';
            END IF;
        END IF;
    END LOOP;
END;
$$;
-- +goose StatementEnd

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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_reserve_one(
    p_task_id        uuid,
    p_attempt_id     uuid,
    p_scope_type     text,
    p_scope_key      text,
    p_metric         text,
    p_window_seconds integer,
    p_limit          numeric,
    p_amount         numeric,
    p_now            timestamptz DEFAULT NULL
)
RETURNS TABLE (
    fits           boolean,     -- whether the amount fit
    grant_id       uuid,        -- the reservation written; NULL when refused
    current_value  numeric,     -- the window's used_value before this admission
    reserved_value numeric,     -- the window's reserved_value before this admission
    window_start   timestamptz,
    reset_at       timestamptz,
    db_now         timestamptz, -- the database clock the decision used
    refusal        text         -- '' or why the admission was refused before the limit was looked at
)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
-- One admission of one window limit. One statement takes the lock, decides
-- and writes: an upsert that creates the window's counter row with the
-- amount (it fits an empty window), or locks the existing row and adds the
-- amount only when it fits, then inserts the reservation.
-- Locks: the counter row (FOR UPDATE, by the upsert), then the new
-- reservation row (FK key-share locks on the task and attempt rows).
-- Index: gateway_rate_limit_counters_pkey (conflict arbiter);
-- pgadmit_task_refusal for the task guard, and pgadmit_task_recheck once
-- the reservation is written (a task finished meanwhile rolls it back).
-- A refusal writes nothing (when the amount did not fit, the upsert only
-- locked the row it read).
DECLARE
    v_now   timestamptz := coalesce(p_now, now());
    v_start timestamptz;
BEGIN
    db_now := v_now;
    v_start := date_bin(make_interval(secs => p_window_seconds), v_now, timestamptz 'epoch');
    window_start := v_start;
    reset_at := v_start + make_interval(secs => p_window_seconds);
    refusal := '';
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        -- Reads are exact only in READ COMMITTED: each statement sees what
        -- the previous holder of a lock committed.
        refusal := 'isolation';
    ELSIF p_task_id IS NOT NULL OR p_attempt_id IS NOT NULL THEN
        refusal := pgadmit_task_refusal(p_task_id, p_attempt_id);
    END IF;
    fits := false;
    IF refusal = '' AND p_amount <= p_limit THEN
        WITH counter AS (
            INSERT INTO gateway_rate_limit_counters AS c (
                scope_type, scope_key, metric, window_seconds, window_start, reset_at,
                limit_value, reserved_value, created_at, updated_at
            )
            VALUES (p_scope_type, p_scope_key, p_metric, p_window_seconds, v_start,
                    v_start + make_interval(secs => p_window_seconds), p_limit, p_amount, v_now, v_now)
            ON CONFLICT ON CONSTRAINT gateway_rate_limit_counters_pkey DO UPDATE
            SET reserved_value = c.reserved_value + excluded.reserved_value,
                limit_value = excluded.limit_value,
                updated_at = excluded.updated_at
            WHERE c.used_value + c.reserved_value + excluded.reserved_value <= excluded.limit_value
            RETURNING c.used_value, c.reserved_value - p_amount AS reserved_before
        ),
        reservation AS (
            INSERT INTO gateway_rate_limit_reservations (
                task_id, attempt_id, scope_type, scope_key, metric, window_seconds, window_start,
                limit_value, reserved_amount, created_at, updated_at
            )
            SELECT p_task_id, p_attempt_id, p_scope_type, p_scope_key, p_metric, p_window_seconds, v_start,
                   p_limit, p_amount, v_now, v_now
            FROM counter
            RETURNING gateway_rate_limit_reservations.id
        )
        SELECT reservation.id, counter.used_value, counter.reserved_before
        INTO grant_id, current_value, reserved_value
        FROM counter, reservation;
        fits := FOUND;
    END IF;
    IF NOT fits THEN
        -- Explain the refusal. When the upsert found the amount did not fit,
        -- it left the row locked: this reads what it saw.
        SELECT c.used_value, c.reserved_value INTO current_value, reserved_value
        FROM gateway_rate_limit_counters AS c
        WHERE c.scope_type = p_scope_type AND c.scope_key = p_scope_key AND c.metric = p_metric
          AND c.window_seconds = p_window_seconds AND c.window_start = v_start;
        current_value := coalesce(current_value, 0);
        reserved_value := coalesce(reserved_value, 0);
        fits := current_value + reserved_value + p_amount <= p_limit;
        grant_id := NULL;
    END IF;
    IF grant_id IS NOT NULL AND (p_task_id IS NOT NULL OR p_attempt_id IS NOT NULL) THEN
        -- The task checked again, now that the reservation's insert holds
        -- its row (pgadmit_task_recheck).
        PERFORM pgadmit_task_recheck(ARRAY[p_task_id], ARRAY[p_attempt_id], ARRAY[true]);
    END IF;
    RETURN NEXT;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadmit_reserve_windows(
    p_scope_types    text[],
    p_scope_keys     text[],
    p_metrics        text[],
    p_window_seconds integer[],
    p_limits         numeric[],
    p_amounts        numeric[]
)
RETURNS TABLE (
    admission      integer,     -- 1-based index into the arrays (one admission per element)
    is_lease       boolean,     -- always false: the rows of pgadmit_reserve, which this may call
    ord            integer,     -- equal to admission
    fits           boolean,     -- whether the amount fit when the admission was decided
    grant_id       uuid,        -- the reservation written; NULL when refused
    current_value  numeric,     -- used_value of the window before this admission
    reserved_value numeric,     -- reserved_value of the window before this admission
    window_start   timestamptz,
    reset_at       timestamptz,
    db_now         timestamptz, -- the database clock the decision used
    refusal        text         -- '' or why the admission was refused before its limit was looked at
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
-- Decides a batch of task-less admissions of one window limit each, in
-- arrival order, as pgadmit_reserve would: element i of the arrays is
-- admission i. Returns one row per admission.
-- One statement sums what the batch asks of each counter and, in one
-- upsert, adds the sum to every counter it fits whole (creating missing
-- rows): every admission on such a counter is admitted, and its
-- reservation is written by the same statement. The admissions on a counter
-- where the sum does not fit are then decided one by one, against a
-- running total, by pgadmit_reserve (in the same transaction, under the
-- locks already held). A refusal writes nothing, except that a counter row
-- the batch found missing stays behind with zero usage.
-- Locks: every distinct counter row of the batch, once, in primary-key order
-- (the lock order), by the upsert; then the new reservation rows.
-- Index: gateway_rate_limit_counters_pkey (conflict arbiter);
-- gateway_rate_limit_reservations_pkey and the table's other indexes (inserts).
-- Statements: 2 when every counter takes its sum (the usual case with room
-- left), whatever the batch size; otherwise those of pgadmit_reserve too.
DECLARE
    v_now      timestamptz := now();
    n          integer := coalesce(cardinality(p_scope_types), 0);
    d_adm      integer[];  -- the admissions the upsert admitted, and what they saw
    d_id       uuid[];
    d_used     numeric[];
    d_reserved numeric[];
    v_rest     integer[];  -- the admissions left to pgadmit_reserve, and their limits
    r_types    text[];
    r_keys     text[];
    r_metrics  text[];
    r_seconds  integer[];
    r_limits   numeric[];
    r_amounts  numeric[];
BEGIN
    -- Reads are exact only in READ COMMITTED; pgadmit_reserve refuses the
    -- whole batch otherwise.
    IF current_setting('transaction_isolation') = 'read committed' THEN
        WITH input AS (
            SELECT u.i::integer AS i, u.st, u.sk, u.m, u.ws, u.lim, u.amount,
                   date_bin(make_interval(secs => u.ws), v_now, timestamptz 'epoch') AS wst
            FROM unnest(p_scope_types, p_scope_keys, p_metrics, p_window_seconds, p_limits, p_amounts)
                 WITH ORDINALITY AS u(st, sk, m, ws, lim, amount, i)
        ),
        -- Per counter: the sum the batch asks, checked against the smallest
        -- of its limits (enough for each admission to fit in arrival
        -- order); 0 when it does not fit, so the upsert only locks the row
        -- (and a row it creates carries the last limit, as pgadmit_reserve
        -- writes it).
        wanted AS (
            SELECT input.st, input.sk, input.m, input.ws, input.wst,
                   CASE WHEN sum(input.amount) <= min(input.lim) THEN sum(input.amount) ELSE 0 END AS take,
                   CASE WHEN sum(input.amount) <= min(input.lim) THEN min(input.lim)
                        ELSE (array_agg(input.lim ORDER BY input.i DESC))[1] END AS guard
            FROM input
            GROUP BY input.st, input.sk, input.m, input.ws, input.wst
        ),
        up AS (
            INSERT INTO gateway_rate_limit_counters AS c (
                scope_type, scope_key, metric, window_seconds, window_start, reset_at,
                limit_value, reserved_value, created_at, updated_at
            )
            SELECT w.st, w.sk, w.m, w.ws, w.wst, w.wst + make_interval(secs => w.ws), w.guard, w.take, v_now, v_now
            FROM wanted AS w
            ORDER BY w.st COLLATE "C", w.sk COLLATE "C", w.m COLLATE "C", w.ws
            ON CONFLICT ON CONSTRAINT gateway_rate_limit_counters_pkey DO UPDATE
            SET reserved_value = c.reserved_value + excluded.reserved_value,
                limit_value = excluded.limit_value,
                updated_at = excluded.updated_at
            WHERE excluded.reserved_value > 0
              AND c.used_value + c.reserved_value + excluded.reserved_value <= excluded.limit_value
            RETURNING c.scope_type, c.scope_key, c.metric, c.window_seconds, c.used_value, c.reserved_value
        ),
        -- The admissions on counters that took their sum; each saw the
        -- counter as it was before the batch plus the admissions before it.
        admitted AS (
            SELECT input.i, pgadmit_uuidv7() AS id, input.st, input.sk, input.m, input.ws, input.wst,
                   input.lim, input.amount, up.used_value,
                   up.reserved_value - w.take - input.amount
                       + sum(input.amount) OVER (PARTITION BY input.st, input.sk, input.m, input.ws ORDER BY input.i)
                       AS reserved_before
            FROM up
            JOIN wanted AS w
              ON w.st = up.scope_type AND w.sk = up.scope_key AND w.m = up.metric AND w.ws = up.window_seconds
            JOIN input
              ON input.st = w.st AND input.sk = w.sk AND input.m = w.m AND input.ws = w.ws
            WHERE w.take > 0
        ),
        written AS (
            INSERT INTO gateway_rate_limit_reservations (
                id, scope_type, scope_key, metric, window_seconds, window_start,
                limit_value, reserved_amount, created_at, updated_at
            )
            SELECT a.id, a.st, a.sk, a.m, a.ws, a.wst, a.lim, a.amount, v_now, v_now
            FROM admitted AS a
        )
        SELECT array_agg(a.i), array_agg(a.id), array_agg(a.used_value), array_agg(a.reserved_before)
        INTO d_adm, d_id, d_used, d_reserved
        FROM admitted AS a;
    END IF;

    RETURN QUERY
    SELECT d.adm, false, d.adm, true, d.id, d.used, d.reserved,
           date_bin(make_interval(secs => p_window_seconds[d.adm]), v_now, timestamptz 'epoch'),
           date_bin(make_interval(secs => p_window_seconds[d.adm]), v_now, timestamptz 'epoch')
               + make_interval(secs => p_window_seconds[d.adm]),
           v_now, ''::text
    FROM unnest(d_adm, d_id, d_used, d_reserved) AS d(adm, id, used, reserved);
    IF coalesce(cardinality(d_adm), 0) = n THEN
        RETURN;
    END IF;

    -- The admissions left, in arrival order, and their limits.
    SELECT array_agg(k ORDER BY k),
           array_agg(p_scope_types[k] ORDER BY k), array_agg(p_scope_keys[k] ORDER BY k),
           array_agg(p_metrics[k] ORDER BY k), array_agg(p_window_seconds[k] ORDER BY k),
           array_agg(p_limits[k] ORDER BY k), array_agg(p_amounts[k] ORDER BY k)
    INTO v_rest, r_types, r_keys, r_metrics, r_seconds, r_limits, r_amounts
    FROM generate_series(1, n) AS k
    WHERE k <> ALL(coalesce(d_adm, '{}'));
    RETURN QUERY
    SELECT v_rest[r.admission], r.is_lease, v_rest[r.ord], r.fits, r.grant_id, r.current_value, r.reserved_value,
           r.window_start, r.reset_at, r.db_now, r.refusal
    FROM pgadmit_reserve(
        array_fill(NULL::uuid, ARRAY[cardinality(v_rest)]), array_fill(NULL::uuid, ARRAY[cardinality(v_rest)]),
        ARRAY(SELECT generate_series(1, cardinality(v_rest))),
        r_types, r_keys, r_metrics, r_seconds, r_limits, r_amounts,
        '{}', '{}', '{}', '{}', '{}', '{}', v_now
    ) AS r;
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
