-- Admission and settlement as PL/pgSQL functions.
--
-- Why functions: the statements of an admission used to be large CTEs over
-- unnest()ed arrays, pipelined four at a time. PostgreSQL re-planned them on
-- every call (their custom plans cost more to plan than to run) and their
-- generic plans ran slowly. A PL/pgSQL function caches the plan of each
-- statement in its body for the life of the session; every statement here is
-- a primary-key probe with scalar parameters, or an INSERT of rows already
-- decided, whose generic plans are as good as custom ones. What is left to
-- pay per statement is starting its executor, so the common shapes take
-- short paths with as few statements as possible: a reservation of one
-- window limit is one upsert and one insert; settling it is one lock, one
-- update of the reservation and one of its counter.
--
-- One call is one statement: one round trip and one implicit transaction
-- (or part of the caller's), no session state, so it works the same through
-- a transaction-pooling PgBouncer.
--
-- Both functions take a batch (several admissions, several reservations);
-- a single Reserve or Commit is a batch of one.
--
-- Lock order, the same for every pgadmit statement: window counter rows in
-- primary-key order (byte order of the text columns, COLLATE "C"), then
-- transaction advisory locks of concurrency scopes in lock-key order, then
-- other rows. Transactions that follow it cannot deadlock one another.

-- +goose Up

-- +goose StatementBegin
CREATE FUNCTION pgadmit_task_refusal(p_task_id uuid, p_attempt_id uuid)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
-- Why an admission for this task and attempt must be refused before any
-- limit is looked at ('' when it may go on): capacity may be taken only for
-- a live task and a running attempt, so that a worker whose task was
-- reclaimed holds nothing that recovery would not find.
-- Locks: none (reads).
-- Index: gateway_tasks_pkey; gateway_task_attempts_pkey.
DECLARE
    v_status text;
    v_task   uuid;
BEGIN
    IF p_task_id IS NOT NULL THEN
        SELECT t.status INTO v_status FROM gateway_tasks AS t WHERE t.id = p_task_id;
        IF NOT FOUND THEN
            RETURN 'unknown_task';
        ELSIF v_status NOT IN ('queued', 'running') THEN
            RETURN 'task_finished';
        END IF;
    END IF;
    IF p_attempt_id IS NOT NULL THEN
        SELECT a.task_id, a.status INTO v_task, v_status FROM gateway_task_attempts AS a WHERE a.id = p_attempt_id;
        IF NOT FOUND OR v_task IS DISTINCT FROM coalesce(p_task_id, v_task) THEN
            RETURN 'unknown_attempt';
        ELSIF v_status <> 'running' THEN
            RETURN 'attempt_finished';
        END IF;
    END IF;
    RETURN '';
END;
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION pgadmit_task_refusal(uuid, uuid) IS
    'Why an admission for this task and attempt is refused outright: unknown_task, task_finished, unknown_attempt, attempt_finished, or '''' when it may go on.';

-- +goose StatementBegin
CREATE FUNCTION pgadmit_reserve(
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
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
-- Decides a batch of admissions, each all or nothing, in arrival order:
-- one entry per admission in p_task_ids and p_attempt_ids (NULL for none);
-- window limits in p_w_* and concurrency limits in p_c_*, grouped by
-- admission in admission order (p_w_admission and p_c_admission name each
-- limit's admission). Returns one row per limit.
-- Locks: FOR UPDATE on each distinct window counter row of the batch, in
-- primary-key order (a missing row is inserted instead, in the same order);
-- then pg_advisory_xact_lock on each distinct concurrency scope, in lock-key
-- order; then inserts reservation and lease rows (FK key-share locks on the
-- task and attempt rows). Each counter row is locked and updated once per
-- batch, however many admissions of the batch it serves.
-- Index: gateway_rate_limit_counters_pkey (one probe per counter);
-- gateway_concurrency_leases_live_scope_idx (live leases of each scope);
-- pgadmit_task_refusal for task guards.
-- Refused admissions write nothing, except that a counter row the batch
-- found missing stays behind with zero usage.
DECLARE
    v_now       timestamptz := coalesce(p_now, now());
    n_adm       integer := coalesce(cardinality(p_task_ids), 0);
    n_w         integer := coalesce(cardinality(p_w_scope_types), 0);
    n_c         integer := coalesce(cardinality(p_c_scope_types), 0);
    v_refusal   text[];
    v_admitted  boolean[];
    -- per window limit
    w_slot      integer[];
    w_fits      boolean[];
    w_used      numeric[];
    w_reserved  numeric[];
    w_id        uuid[];
    -- per distinct counter row (slot), in lock order
    s_type      text[];
    s_key       text[];
    s_metric    text[];
    s_seconds   integer[];
    s_start     timestamptz[];
    s_used      numeric[];
    s_reserved  numeric[];
    s_delta     numeric[];
    s_limit     numeric[];
    n_s         integer := 0;
    -- per concurrency limit
    c_slot      integer[];
    c_fits      boolean[];
    c_active    numeric[];
    c_id        uuid[];
    -- per distinct concurrency scope
    t_active    numeric[];
    t_next      timestamptz[];
    n_t         integer := 0;
    v_used      numeric;
    v_reserved  numeric;
    v_next      timestamptz;
    v_start     timestamptz;
    v_ok        boolean;
    v_sorted    boolean;
    k           record;
    i           integer;
    s           integer;
    wi          integer := 1;
    ci          integer := 1;
    w0          integer;
    c0          integer;
BEGIN
    -- Reads are exact only in READ COMMITTED: each statement sees what the
    -- previous holder of a lock committed.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN QUERY
        SELECT u.adm, false, u.i::integer, false, NULL::uuid, 0::numeric, 0::numeric, v_now, v_now, v_now, 'isolation'::text
        FROM unnest(p_w_admission) WITH ORDINALITY AS u(adm, i)
        UNION ALL
        SELECT u.adm, true, u.i::integer, false, NULL::uuid, 0::numeric, 0::numeric, v_now, v_now, v_now, 'isolation'::text
        FROM unnest(p_c_admission) WITH ORDINALITY AS u(adm, i);
        RETURN;
    END IF;

    -- Short path: one admission of one window limit (the most common
    -- shape): a guarded upsert locks, decides and adds in one statement.
    IF n_adm = 1 AND n_w = 1 AND n_c = 0 THEN
        admission := 1;
        is_lease := false;
        ord := 1;
        db_now := v_now;
        v_start := date_bin(make_interval(secs => p_w_window_seconds[1]), v_now, timestamptz 'epoch');
        window_start := v_start;
        reset_at := v_start + make_interval(secs => p_w_window_seconds[1]);
        refusal := '';
        IF p_task_ids[1] IS NOT NULL OR p_attempt_ids[1] IS NOT NULL THEN
            refusal := pgadmit_task_refusal(p_task_ids[1], p_attempt_ids[1]);
        END IF;
        fits := false;
        IF refusal = '' AND p_w_amounts[1] <= p_w_limits[1] THEN
            -- A new row starts with the amount (it fits an empty window); an
            -- existing one is locked, and added to only when the amount
            -- fits. The reservation row is written in the same statement,
            -- after the counter (the lock order).
            WITH counter AS (
                INSERT INTO gateway_rate_limit_counters AS c (
                    scope_type, scope_key, metric, window_seconds, window_start, reset_at,
                    limit_value, reserved_value, created_at, updated_at
                )
                VALUES (p_w_scope_types[1], p_w_scope_keys[1], p_w_metrics[1], p_w_window_seconds[1],
                        v_start, v_start + make_interval(secs => p_w_window_seconds[1]), p_w_limits[1],
                        p_w_amounts[1], v_now, v_now)
                ON CONFLICT ON CONSTRAINT gateway_rate_limit_counters_pkey DO UPDATE
                SET reserved_value = c.reserved_value + excluded.reserved_value,
                    limit_value = excluded.limit_value,
                    updated_at = excluded.updated_at
                WHERE c.used_value + c.reserved_value + excluded.reserved_value <= excluded.limit_value
                RETURNING c.used_value, c.reserved_value - p_w_amounts[1] AS reserved_before
            ),
            reservation AS (
                INSERT INTO gateway_rate_limit_reservations (
                    task_id, attempt_id, scope_type, scope_key, metric, window_seconds, window_start,
                    limit_value, reserved_amount, created_at, updated_at
                )
                SELECT p_task_ids[1], p_attempt_ids[1], p_w_scope_types[1], p_w_scope_keys[1], p_w_metrics[1],
                       p_w_window_seconds[1], v_start, p_w_limits[1], p_w_amounts[1], v_now, v_now
                FROM counter
                RETURNING gateway_rate_limit_reservations.id
            )
            SELECT reservation.id, counter.used_value, counter.reserved_before
            INTO grant_id, current_value, reserved_value
            FROM counter, reservation;
            fits := FOUND;
        END IF;
        IF NOT fits THEN
            -- Explain the refusal. When the upsert above found the amount
            -- did not fit, it left the row locked: this reads what it saw.
            SELECT c.used_value, c.reserved_value INTO current_value, reserved_value
            FROM gateway_rate_limit_counters AS c
            WHERE c.scope_type = p_w_scope_types[1] AND c.scope_key = p_w_scope_keys[1]
              AND c.metric = p_w_metrics[1] AND c.window_seconds = p_w_window_seconds[1]
              AND c.window_start = v_start;
            current_value := coalesce(current_value, 0);
            reserved_value := coalesce(reserved_value, 0);
            fits := current_value + reserved_value + p_w_amounts[1] <= p_w_limits[1];
            grant_id := NULL;
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;

    v_refusal := array_fill(''::text, ARRAY[n_adm]);
    v_admitted := array_fill(false, ARRAY[n_adm]);
    FOR i IN 1 .. n_adm LOOP
        IF p_task_ids[i] IS NOT NULL OR p_attempt_ids[i] IS NOT NULL THEN
            v_refusal[i] := pgadmit_task_refusal(p_task_ids[i], p_attempt_ids[i]);
        END IF;
    END LOOP;

    -- Window counters: lock each distinct row once, in primary-key order;
    -- a row that does not exist yet is inserted (empty) at its place in
    -- that order, which locks it as well. Limits already given in that
    -- order, each on its own counter (pgadmit sends one admission so), are
    -- their own slots; otherwise a query sorts and groups them.
    w_slot := array_fill(0, ARRAY[n_w]);
    w_fits := array_fill(false, ARRAY[n_w]);
    v_sorted := true;
    FOR i IN 2 .. n_w LOOP
        IF NOT (ROW(p_w_scope_types[i - 1] COLLATE "C", p_w_scope_keys[i - 1] COLLATE "C",
                    p_w_metrics[i - 1] COLLATE "C", p_w_window_seconds[i - 1])
                < ROW(p_w_scope_types[i] COLLATE "C", p_w_scope_keys[i] COLLATE "C",
                      p_w_metrics[i] COLLATE "C", p_w_window_seconds[i])) THEN
            v_sorted := false;
            EXIT;
        END IF;
    END LOOP;
    IF v_sorted THEN
        s_type := p_w_scope_types;
        s_key := p_w_scope_keys;
        s_metric := p_w_metrics;
        s_seconds := p_w_window_seconds;
        s_limit := p_w_limits;
        n_s := n_w;
        FOR i IN 1 .. n_w LOOP
            w_slot[i] := i;
        END LOOP;
    ELSE
        FOR k IN
            SELECT u.st, u.sk, u.m, u.ws, array_agg(u.i::integer) AS members, min(u.i)::integer AS first
            FROM unnest(p_w_scope_types, p_w_scope_keys, p_w_metrics, p_w_window_seconds)
                 WITH ORDINALITY AS u(st, sk, m, ws, i)
            GROUP BY u.st, u.sk, u.m, u.ws
            ORDER BY u.st COLLATE "C", u.sk COLLATE "C", u.m COLLATE "C", u.ws
        LOOP
            n_s := n_s + 1;
            s_type[n_s] := k.st;
            s_key[n_s] := k.sk;
            s_metric[n_s] := k.m;
            s_seconds[n_s] := k.ws;
            s_limit[n_s] := p_w_limits[k.first];
            FOREACH i IN ARRAY k.members LOOP
                w_slot[i] := n_s;
            END LOOP;
        END LOOP;
    END IF;
    s_delta := array_fill(0::numeric, ARRAY[n_s]);
    FOR s IN 1 .. n_s LOOP
        v_start := date_bin(make_interval(secs => s_seconds[s]), v_now, timestamptz 'epoch');
        s_start[s] := v_start;
        SELECT c.used_value, c.reserved_value INTO v_used, v_reserved
        FROM gateway_rate_limit_counters AS c
        WHERE c.scope_type = s_type[s] AND c.scope_key = s_key[s] AND c.metric = s_metric[s]
          AND c.window_seconds = s_seconds[s] AND c.window_start = v_start
        FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO gateway_rate_limit_counters AS c (
                scope_type, scope_key, metric, window_seconds, window_start, reset_at,
                limit_value, created_at, updated_at
            )
            VALUES (s_type[s], s_key[s], s_metric[s], s_seconds[s], v_start,
                    v_start + make_interval(secs => s_seconds[s]), s_limit[s], v_now, v_now)
            ON CONFLICT DO NOTHING
            RETURNING c.used_value, c.reserved_value INTO v_used, v_reserved;
            IF NOT FOUND THEN -- another transaction inserted it first
                SELECT c.used_value, c.reserved_value INTO v_used, v_reserved
                FROM gateway_rate_limit_counters AS c
                WHERE c.scope_type = s_type[s] AND c.scope_key = s_key[s] AND c.metric = s_metric[s]
                  AND c.window_seconds = s_seconds[s] AND c.window_start = v_start
                FOR UPDATE;
            END IF;
        END IF;
        s_used[s] := v_used;
        s_reserved[s] := v_reserved;
    END LOOP;

    -- Concurrency scopes: one advisory lock each, in lock-key order, then
    -- the live leases of the scope, counted once.
    c_slot := array_fill(0, ARRAY[n_c]);
    c_fits := array_fill(false, ARRAY[n_c]);
    IF n_c = 1 THEN
        n_t := 1;
        c_slot[1] := 1;
        PERFORM pg_advisory_xact_lock(hashtextextended(
            'pgadmit/concurrent/' || length(p_c_scope_types[1])::text || ':' || p_c_scope_types[1] || '/' || p_c_scope_keys[1], 0));
        SELECT coalesce(sum(x.lease_value), 0), min(x.expires_at) INTO v_used, v_next
        FROM gateway_concurrency_leases AS x
        WHERE x.scope_type = p_c_scope_types[1] AND x.scope_key = p_c_scope_keys[1]
          AND x.released_at IS NULL AND x.expires_at > v_now;
        t_active[1] := v_used;
        t_next[1] := v_next;
    ELSIF n_c > 1 THEN
        FOR k IN
            SELECT u.st, u.sk, array_agg(u.i::integer) AS members,
                   hashtextextended('pgadmit/concurrent/' || length(u.st)::text || ':' || u.st || '/' || u.sk, 0) AS lock_key
            FROM unnest(p_c_scope_types, p_c_scope_keys) WITH ORDINALITY AS u(st, sk, i)
            GROUP BY u.st, u.sk
            ORDER BY lock_key, u.st COLLATE "C", u.sk COLLATE "C"
        LOOP
            n_t := n_t + 1;
            PERFORM pg_advisory_xact_lock(k.lock_key);
            SELECT coalesce(sum(x.lease_value), 0), min(x.expires_at) INTO v_used, v_next
            FROM gateway_concurrency_leases AS x
            WHERE x.scope_type = k.st AND x.scope_key = k.sk
              AND x.released_at IS NULL AND x.expires_at > v_now;
            t_active[n_t] := v_used;
            t_next[n_t] := v_next;
            FOREACH i IN ARRAY k.members LOOP
                c_slot[i] := n_t;
            END LOOP;
        END LOOP;
    END IF;

    -- Decide each admission in arrival order against running totals: an
    -- admitted one counts for those after it.
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
        FOR s IN w0 .. wi - 1 LOOP
            w_used[s] := s_used[w_slot[s]];
            w_reserved[s] := s_reserved[w_slot[s]];
            w_fits[s] := w_used[s] + w_reserved[s] + p_w_amounts[s] <= p_w_limits[s];
            v_ok := v_ok AND w_fits[s];
        END LOOP;
        FOR s IN c0 .. ci - 1 LOOP
            c_active[s] := t_active[c_slot[s]];
            c_fits[s] := c_active[s] + p_c_amounts[s] <= p_c_limits[s];
            v_ok := v_ok AND c_fits[s];
        END LOOP;
        IF v_ok THEN
            v_admitted[i] := true;
            FOR s IN w0 .. wi - 1 LOOP
                s_reserved[w_slot[s]] := s_reserved[w_slot[s]] + p_w_amounts[s];
                s_delta[w_slot[s]] := s_delta[w_slot[s]] + p_w_amounts[s];
                s_limit[w_slot[s]] := p_w_limits[s];
                w_id[s] := pgadmit_uuidv7();
            END LOOP;
            FOR s IN c0 .. ci - 1 LOOP
                t_active[c_slot[s]] := t_active[c_slot[s]] + p_c_amounts[s];
                c_id[s] := pgadmit_uuidv7();
            END LOOP;
        END IF;
    END LOOP;

    -- Write what was admitted: each counter once, then the ledger rows.
    FOR s IN 1 .. n_s LOOP
        IF s_delta[s] > 0 THEN
            UPDATE gateway_rate_limit_counters AS c
            SET reserved_value = c.reserved_value + s_delta[s],
                limit_value = s_limit[s],
                updated_at = v_now
            WHERE c.scope_type = s_type[s] AND c.scope_key = s_key[s] AND c.metric = s_metric[s]
              AND c.window_seconds = s_seconds[s] AND c.window_start = s_start[s];
        END IF;
    END LOOP;
    IF n_w > 0 AND w_id IS NOT NULL THEN
        INSERT INTO gateway_rate_limit_reservations (
            id, task_id, attempt_id, scope_type, scope_key, metric, window_seconds, window_start,
            limit_value, reserved_amount, created_at, updated_at
        )
        SELECT u.id, p_task_ids[u.adm], p_attempt_ids[u.adm], u.st, u.sk, u.m, u.ws,
               date_bin(make_interval(secs => u.ws), v_now, timestamptz 'epoch'),
               u.lim, u.amount, v_now, v_now
        FROM unnest(w_id, p_w_admission, p_w_scope_types, p_w_scope_keys, p_w_metrics,
                    p_w_window_seconds, p_w_limits, p_w_amounts)
             AS u(id, adm, st, sk, m, ws, lim, amount)
        WHERE u.id IS NOT NULL;
    END IF;
    IF n_c > 0 AND c_id IS NOT NULL THEN
        INSERT INTO gateway_concurrency_leases (
            id, task_id, attempt_id, scope_type, scope_key, lease_value, limit_value, expires_at, created_at
        )
        SELECT u.id, p_task_ids[u.adm], p_attempt_ids[u.adm], u.st, u.sk, u.amount, u.lim,
               v_now + make_interval(secs => u.ttl), v_now
        FROM unnest(c_id, p_c_admission, p_c_scope_types, p_c_scope_keys, p_c_limits, p_c_amounts, p_c_ttl_seconds)
             AS u(id, adm, st, sk, lim, amount, ttl)
        WHERE u.id IS NOT NULL;
    END IF;

    RETURN QUERY
    SELECT u.adm, false, u.i::integer, u.fits, u.id,
           coalesce(u.used, 0), coalesce(u.reserved, 0),
           date_bin(make_interval(secs => u.ws), v_now, timestamptz 'epoch'),
           date_bin(make_interval(secs => u.ws), v_now, timestamptz 'epoch') + make_interval(secs => u.ws),
           v_now, v_refusal[u.adm]
    FROM unnest(p_w_admission, p_w_window_seconds, w_fits, w_id, w_used, w_reserved)
         WITH ORDINALITY AS u(adm, ws, fits, id, used, reserved, i)
    WHERE u.adm IS NOT NULL
    UNION ALL
    SELECT u.adm, true, u.i::integer, u.fits, u.id,
           coalesce(u.active, 0), 0::numeric, v_now,
           CASE WHEN u.id IS NOT NULL THEN v_now + make_interval(secs => u.ttl)
                ELSE coalesce(t_next[c_slot[u.i]], v_now + make_interval(secs => u.ttl)) END,
           v_now, v_refusal[u.adm]
    FROM unnest(p_c_admission, p_c_ttl_seconds, c_fits, c_id, c_active)
         WITH ORDINALITY AS u(adm, ttl, fits, id, active, i)
    WHERE u.adm IS NOT NULL;
END;
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION pgadmit_reserve(uuid[], uuid[], integer[], text[], text[], text[], integer[], numeric[], numeric[], integer[], text[], text[], numeric[], numeric[], integer[], timestamptz) IS
    'Decides a batch of admissions (each all or nothing, in arrival order) against window counters and concurrency leases, and records what it admitted. Called by AdmissionReserve (queries/admission.sql).';

-- +goose StatementBegin
CREATE FUNCTION pgadmit_settle(
    p_reservation_ids uuid[],
    p_scope_types     text[],
    p_scope_keys      text[],
    p_metrics         text[],
    p_window_seconds  integer[],
    p_window_starts   timestamptz[],
    p_actual_amounts  numeric[],
    p_status          text,
    p_reason          text,
    p_lease_ids       uuid[],
    p_lease_reason    text,
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
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
-- Commits (p_status 'committed', with p_actual_amounts) or releases
-- ('released') open reservations and moves their amounts in their counters,
-- then releases unreleased leases. Idempotent: what is already settled is
-- reported with settled = false and left alone.
-- p_scope_types .. p_window_starts name each reservation's counter, as the
-- caller's grant says; a reservation that draws on another counter makes
-- the call fail (nothing is written). When they are NULL, the counters are
-- read from the reservations that are still open.
-- Locks: FOR UPDATE on those counters, once each, in primary-key order (the
-- lock order); then row locks on the reservations and leases it settles.
-- Each counter is updated once, however many of its reservations the call
-- settles.
-- Index: gateway_rate_limit_reservations_pkey; gateway_rate_limit_counters_pkey;
-- gateway_concurrency_leases_pkey (every statement is a primary-key probe).
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    n_r        integer := coalesce(cardinality(p_reservation_ids), 0);
    n_l        integer := coalesce(cardinality(p_lease_ids), 0);
    k_type     text[] := p_scope_types;      -- each reservation's counter (NULL: not open)
    k_key      text[] := p_scope_keys;
    k_metric   text[] := p_metrics;
    k_seconds  integer[] := p_window_seconds;
    k_start    timestamptz[] := p_window_starts;
    r_slot     integer[];                    -- each reservation's counter slot
    s_type     text[];                       -- per counter slot, in lock order
    s_key      text[];
    s_metric   text[];
    s_seconds  integer[];
    s_start    timestamptz[];
    s_released numeric[];
    s_used     numeric[];
    n_s        integer := 0;
    v_type     text;
    v_key      text;
    v_metric   text;
    v_seconds  integer;
    v_start    timestamptz;
    v_released numeric;
    v_used     numeric;
    v_sorted   boolean;
    k          record;
    i          integer;
    j          integer;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('committed', 'released') THEN
        RAISE EXCEPTION 'pgadmit_settle: status must be committed or released, not %', p_status
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    IF n_r > 0 AND p_scope_types IS NULL THEN
        -- The counters of the reservations that are open now.
        k_type := array_fill(NULL::text, ARRAY[n_r]);
        k_key := k_type;
        k_metric := k_type;
        k_seconds := array_fill(NULL::integer, ARRAY[n_r]);
        k_start := array_fill(NULL::timestamptz, ARRAY[n_r]);
        FOR i IN 1 .. n_r LOOP
            SELECT r.scope_type, r.scope_key, r.metric, r.window_seconds, r.window_start
            INTO v_type, v_key, v_metric, v_seconds, v_start
            FROM gateway_rate_limit_reservations AS r
            WHERE r.id = p_reservation_ids[i] AND r.status = 'reserved';
            IF FOUND THEN
                k_type[i] := v_type;
                k_key[i] := v_key;
                k_metric[i] := v_metric;
                k_seconds[i] := v_seconds;
                k_start[i] := v_start;
            END IF;
        END LOOP;
    END IF;

    -- Short path: one reservation whose counter is known. One statement
    -- locks the counter, then settles the reservation (the lock order);
    -- the next moves the amounts.
    IF n_r = 1 AND k_type[1] IS NOT NULL THEN
        is_lease := false;
        ord := 1;
        id := p_reservation_ids[1];
        WITH counter AS (
            SELECT 1
            FROM gateway_rate_limit_counters AS c
            WHERE c.scope_type = k_type[1] AND c.scope_key = k_key[1] AND c.metric = k_metric[1]
              AND c.window_seconds = k_seconds[1] AND c.window_start = k_start[1]
            FOR UPDATE
        )
        UPDATE gateway_rate_limit_reservations AS r
        SET status = p_status,
            reason = p_reason,
            actual_amount = CASE WHEN p_status = 'committed' THEN p_actual_amounts[1] END,
            finalized_at = v_now,
            updated_at = v_now
        FROM counter
        WHERE r.id = p_reservation_ids[1] AND r.status = 'reserved'
        RETURNING r.scope_type, r.scope_key, r.metric, r.window_seconds, r.window_start,
                  r.status, r.reserved_amount, r.actual_amount
        INTO v_type, v_key, v_metric, v_seconds, v_start, status, reserved_amount, actual_amount;
        settled := FOUND;
        IF settled THEN
            IF v_type <> k_type[1] OR v_key <> k_key[1] OR v_metric <> k_metric[1]
               OR v_seconds <> k_seconds[1] OR v_start <> k_start[1] THEN
                RAISE EXCEPTION 'pgadmit_settle: reservation % draws on %:% % %s %, not on the counter given',
                    id, v_type, v_key, v_metric, v_seconds, v_start
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            metric := v_metric;
            v_released := reserved_amount;
            v_used := coalesce(actual_amount, 0);
            UPDATE gateway_rate_limit_counters AS c
            SET reserved_value = c.reserved_value - v_released,
                used_value = c.used_value + v_used,
                updated_at = v_now
            WHERE c.scope_type = v_type AND c.scope_key = v_key AND c.metric = v_metric
              AND c.window_seconds = v_seconds AND c.window_start = v_start;
        ELSE
            SELECT r.status, r.metric, r.reserved_amount, r.actual_amount
            INTO status, metric, reserved_amount, actual_amount
            FROM gateway_rate_limit_reservations AS r
            WHERE r.id = p_reservation_ids[1];
        END IF;
        RETURN NEXT;
        n_r := 0; -- settled; the leases follow
    END IF;

    -- Lock the counters once each, in primary-key order. Reservations
    -- already given in that order, each on its own counter (pgadmit sends
    -- a grant so), are their own slots; otherwise a query sorts and groups
    -- them.
    IF n_r > 0 THEN
        r_slot := array_fill(0, ARRAY[n_r]);
        v_sorted := k_type[1] IS NOT NULL;
        FOR i IN 2 .. n_r LOOP
            IF k_type[i] IS NULL
               OR NOT (ROW(k_type[i - 1] COLLATE "C", k_key[i - 1] COLLATE "C", k_metric[i - 1] COLLATE "C",
                           k_seconds[i - 1], k_start[i - 1])
                       < ROW(k_type[i] COLLATE "C", k_key[i] COLLATE "C", k_metric[i] COLLATE "C",
                             k_seconds[i], k_start[i])) THEN
                v_sorted := false;
                EXIT;
            END IF;
        END LOOP;
        IF v_sorted THEN
            s_type := k_type;
            s_key := k_key;
            s_metric := k_metric;
            s_seconds := k_seconds;
            s_start := k_start;
            n_s := n_r;
            FOR i IN 1 .. n_r LOOP
                r_slot[i] := i;
            END LOOP;
        ELSE
            FOR k IN
                SELECT u.st, u.sk, u.m, u.ws, u.wst, array_agg(u.pos::integer) AS members
                FROM unnest(k_type, k_key, k_metric, k_seconds, k_start) WITH ORDINALITY AS u(st, sk, m, ws, wst, pos)
                WHERE u.st IS NOT NULL
                GROUP BY u.st, u.sk, u.m, u.ws, u.wst
                ORDER BY u.st COLLATE "C", u.sk COLLATE "C", u.m COLLATE "C", u.ws, u.wst
            LOOP
                n_s := n_s + 1;
                s_type[n_s] := k.st;
                s_key[n_s] := k.sk;
                s_metric[n_s] := k.m;
                s_seconds[n_s] := k.ws;
                s_start[n_s] := k.wst;
                FOREACH j IN ARRAY k.members LOOP
                    r_slot[j] := n_s;
                END LOOP;
            END LOOP;
        END IF;
        s_released := array_fill(0::numeric, ARRAY[n_s]);
        s_used := array_fill(0::numeric, ARRAY[n_s]);
        FOR j IN 1 .. n_s LOOP
            PERFORM 1
            FROM gateway_rate_limit_counters AS c
            WHERE c.scope_type = s_type[j] AND c.scope_key = s_key[j] AND c.metric = s_metric[j]
              AND c.window_seconds = s_seconds[j] AND c.window_start = s_start[j]
            FOR UPDATE;
        END LOOP;
    END IF;

    -- Settle each reservation that is still open; report every one.
    FOR i IN 1 .. n_r LOOP
        is_lease := false;
        ord := i;
        id := p_reservation_ids[i];
        settled := false;
        IF r_slot[i] > 0 THEN
            UPDATE gateway_rate_limit_reservations AS r
            SET status = p_status,
                reason = p_reason,
                actual_amount = CASE WHEN p_status = 'committed' THEN p_actual_amounts[i] END,
                finalized_at = v_now,
                updated_at = v_now
            WHERE r.id = p_reservation_ids[i] AND r.status = 'reserved'
            RETURNING r.scope_type, r.scope_key, r.metric, r.window_seconds, r.window_start,
                      r.status, r.reserved_amount, r.actual_amount
            INTO v_type, v_key, v_metric, v_seconds, v_start, status, reserved_amount, actual_amount;
            settled := FOUND;
        END IF;
        IF settled THEN
            j := r_slot[i];
            IF v_type <> s_type[j] OR v_key <> s_key[j] OR v_metric <> s_metric[j]
               OR v_seconds <> s_seconds[j] OR v_start <> s_start[j] THEN
                RAISE EXCEPTION 'pgadmit_settle: reservation % draws on %:% % %s %, not on the counter given',
                    id, v_type, v_key, v_metric, v_seconds, v_start
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            metric := v_metric;
            s_released[j] := s_released[j] + reserved_amount;
            s_used[j] := s_used[j] + coalesce(actual_amount, 0);
        ELSE
            SELECT r.status, r.metric, r.reserved_amount, r.actual_amount
            INTO status, metric, reserved_amount, actual_amount
            FROM gateway_rate_limit_reservations AS r
            WHERE r.id = p_reservation_ids[i];
        END IF;
        RETURN NEXT;
    END LOOP;

    -- Move the amounts: each counter once.
    FOR j IN 1 .. n_s LOOP
        IF s_released[j] > 0 THEN
            UPDATE gateway_rate_limit_counters AS c
            SET reserved_value = c.reserved_value - s_released[j],
                used_value = c.used_value + s_used[j],
                updated_at = v_now
            WHERE c.scope_type = s_type[j] AND c.scope_key = s_key[j] AND c.metric = s_metric[j]
              AND c.window_seconds = s_seconds[j] AND c.window_start = s_start[j];
        END IF;
    END LOOP;

    -- Leases: one that is already released is skipped.
    FOR i IN 1 .. n_l LOOP
        UPDATE gateway_concurrency_leases AS l
        SET released_at = v_now,
            reason = p_lease_reason
        WHERE l.id = p_lease_ids[i] AND l.released_at IS NULL;
        is_lease := true;
        ord := i;
        id := p_lease_ids[i];
        settled := FOUND;
        status := NULL;
        metric := NULL;
        reserved_amount := NULL;
        actual_amount := NULL;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION pgadmit_settle(uuid[], text[], text[], text[], integer[], timestamptz[], numeric[], text, text, uuid[], text, timestamptz) IS
    'Commits or releases reservations (moving their amounts in their counters) and releases leases, idempotently. Called by AdmissionSettle (queries/admission.sql).';

-- +goose Down

DROP FUNCTION pgadmit_settle(uuid[], text[], text[], text[], integer[], timestamptz[], numeric[], text, text, uuid[], text, timestamptz);
DROP FUNCTION pgadmit_reserve(uuid[], uuid[], integer[], text[], text[], text[], integer[], numeric[], numeric[], integer[], text[], text[], numeric[], numeric[], integer[], timestamptz);
DROP FUNCTION pgadmit_task_refusal(uuid, uuid);
