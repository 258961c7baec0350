-- Batches on a hot counter release its row lock before their commit is
-- flushed, and are answered only after it is.
--
-- A combined statement holds every counter row it updates until its
-- transaction ends, and a transaction ends after its commit record is
-- flushed to disk. On a counter that every batch touches (one hot key, a
-- provider-wide limit) the next batch waits for that flush too, so the
-- batches of Reserve and of Commit take turns on the row, each paying its
-- own execution and its own flush while the other waits.
--
-- These procedures run such a batch in two transactions: the first does
-- the work of the function they wrap and commits without waiting for its
-- flush (synchronous_commit off for that transaction alone), which
-- releases its locks at once; the second writes one WAL record (a
-- transactional logical decoding message, prefix 'pgadmit') and commits
-- with the session's own synchronous_commit, waiting for its flush. WAL is
-- written in order, so that flush makes the first commit durable too; the
-- procedure returns, and the client answers its callers, only then. A
-- caller is never told of an admission or a settlement that a crash could
-- still undo. What other transactions may see earlier is an admission that
-- a crash could undo: it can only make them refuse, never over-admit, and
-- anything they commit after it is flushed after it.
--
-- A procedure may commit only when it is called outside a transaction
-- block: the library calls these from its combined batches (on a pool or a
-- connection), never in a caller's transaction (Limiter.WithTx). The
-- results come back as INOUT arrays, one per column of the wrapped
-- function's rows, in the same order.

-- +goose Up
SET LOCAL lock_timeout = '5s';

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
COMMENT ON PROCEDURE pgadmit_hot_reserve_windows(text[], text[], text[], integer[], numeric[], numeric[], integer[], boolean[], integer[], boolean[], uuid[], numeric[], numeric[], timestamptz[], timestamptz[], timestamptz[], text[]) IS
    'pgadmit_reserve_windows for a batch on a hot counter: commits without waiting for the flush (locks released at once), then returns after a second, durable commit has flushed it.';

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
COMMENT ON PROCEDURE pgadmit_hot_reserve(uuid[], uuid[], integer[], text[], text[], text[], integer[], numeric[], numeric[], integer[], text[], text[], numeric[], numeric[], integer[], timestamptz, integer[], boolean[], integer[], boolean[], uuid[], numeric[], numeric[], timestamptz[], timestamptz[], timestamptz[], text[]) IS
    'pgadmit_reserve for a batch on a hot counter: commits without waiting for the flush (locks released at once), then returns after a second, durable commit has flushed it.';

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
COMMENT ON PROCEDURE pgadmit_hot_settle(uuid[], text[], text[], text[], integer[], timestamptz[], text[], numeric[], text[], uuid[], text[], timestamptz, boolean[], integer[], uuid[], boolean[], text[], text[], numeric[], numeric[]) IS
    'pgadmit_settle for a batch on a hot counter: commits without waiting for the flush (locks released at once), then returns after a second, durable commit has flushed it.';

-- +goose Down
SET LOCAL lock_timeout = '5s';

DROP PROCEDURE pgadmit_hot_settle(uuid[], text[], text[], text[], integer[], timestamptz[], text[], numeric[], text[], uuid[], text[], timestamptz, boolean[], integer[], uuid[], boolean[], text[], text[], numeric[], numeric[]);
DROP PROCEDURE pgadmit_hot_reserve(uuid[], uuid[], integer[], text[], text[], text[], integer[], numeric[], numeric[], integer[], text[], text[], numeric[], numeric[], integer[], timestamptz, integer[], boolean[], integer[], boolean[], uuid[], numeric[], numeric[], timestamptz[], timestamptz[], timestamptz[], text[]);
DROP PROCEDURE pgadmit_hot_reserve_windows(text[], text[], text[], integer[], numeric[], numeric[], integer[], boolean[], integer[], boolean[], uuid[], numeric[], numeric[], timestamptz[], timestamptz[], timestamptz[], text[]);
