-- A batch on a hot counter is committed by a procedure pipelined after it,
-- so that its callers learn what it granted whatever becomes of its
-- commit.
--
-- The procedures of 00009 ran such a batch's function and committed it
-- (without waiting for the flush), then wrote and flushed a second
-- transaction, and returned the function's rows only at the end. A cancel
-- request that landed while the first transaction committed is deferred
-- by PostgreSQL to the procedure's next statement (no PL/pgSQL handler can
-- catch it there: the check comes before any statement runs). The
-- procedure then failed after its first commit, the rows were lost, and
-- what they granted stayed held with nobody knowing of it, until the
-- reservations' windows ended and the leases' TTLs.
--
-- Now the client sends the batch's own statement (the function, as for any
-- batch) and, in the same round trip and the same implicit transaction,
-- CALL pgadmit_hot_commit(). The procedure commits the transaction without
-- waiting for its flush (which releases the counter rows and scope locks
-- at once), then writes one WAL record in a second transaction whose
-- commit, with the session's synchronous_commit, flushes both. WAL is
-- written in order. The function's rows reach the client with the
-- procedure's outcome (the server sends them at the round trip's Sync, or
-- with an error). A client that has the rows and an error from the
-- procedure (a cancel deferred past its commit) cannot tell whether the
-- batch committed; it knows the grants' ids, releases them (a no-op on
-- rows that were never committed) and tells its callers the batch failed.
--
-- The procedures of 00009 stay, so that instances still running an earlier
-- pgadmit keep working during an upgrade; this version no longer calls
-- them. A later migration will drop them.

-- +goose Up
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE PROCEDURE pgadmit_hot_commit()
LANGUAGE plpgsql AS $$
-- Commits the caller's implicit transaction without waiting for its flush,
-- then returns once a second, durable commit has flushed it. Called in the
-- same pipeline (before its Sync) as the statement of a batch on a hot
-- counter, never in a transaction block (where a procedure cannot commit).
-- Locks: none of its own; its COMMIT releases those of the batch.
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    COMMIT;
    PERFORM pg_logical_emit_message(true, 'pgadmit', 'flush');
END;
$$;
-- +goose StatementEnd
COMMENT ON PROCEDURE pgadmit_hot_commit() IS
    'Commits the batch that precedes it in its pipeline without waiting for the flush (locks released at once), then returns after a second, durable commit has flushed it. Called by AdmissionHotCommit (queries/admission.sql).';

COMMENT ON PROCEDURE pgadmit_hot_reserve_windows(text[], text[], text[], integer[], numeric[], numeric[], integer[], boolean[], integer[], boolean[], uuid[], numeric[], numeric[], timestamptz[], timestamptz[], timestamptz[], text[]) IS
    'No longer called (since migration 00012: pgadmit_hot_commit); kept for instances of an earlier pgadmit during an upgrade.';
COMMENT ON PROCEDURE pgadmit_hot_reserve(uuid[], uuid[], integer[], text[], text[], text[], integer[], numeric[], numeric[], integer[], text[], text[], numeric[], numeric[], integer[], timestamptz, integer[], boolean[], integer[], boolean[], uuid[], numeric[], numeric[], timestamptz[], timestamptz[], timestamptz[], text[]) IS
    'No longer called (since migration 00012: pgadmit_hot_commit); kept for instances of an earlier pgadmit during an upgrade.';
COMMENT ON PROCEDURE pgadmit_hot_settle(uuid[], text[], text[], text[], integer[], timestamptz[], text[], numeric[], text[], uuid[], text[], timestamptz, boolean[], integer[], uuid[], boolean[], text[], text[], numeric[], numeric[]) IS
    'No longer called (since migration 00012: pgadmit_hot_commit); kept for instances of an earlier pgadmit during an upgrade.';

-- +goose Down
SET LOCAL lock_timeout = '5s';

COMMENT ON PROCEDURE pgadmit_hot_reserve_windows(text[], text[], text[], integer[], numeric[], numeric[], integer[], boolean[], integer[], boolean[], uuid[], numeric[], numeric[], timestamptz[], timestamptz[], timestamptz[], text[]) IS
    'pgadmit_reserve_windows for a batch on a hot counter: commits without waiting for the flush (locks released at once), then returns after a second, durable commit has flushed it.';
COMMENT ON PROCEDURE pgadmit_hot_reserve(uuid[], uuid[], integer[], text[], text[], text[], integer[], numeric[], numeric[], integer[], text[], text[], numeric[], numeric[], integer[], timestamptz, integer[], boolean[], integer[], boolean[], uuid[], numeric[], numeric[], timestamptz[], timestamptz[], timestamptz[], text[]) IS
    'pgadmit_reserve for a batch on a hot counter: commits without waiting for the flush (locks released at once), then returns after a second, durable commit has flushed it.';
COMMENT ON PROCEDURE pgadmit_hot_settle(uuid[], text[], text[], text[], integer[], timestamptz[], text[], numeric[], text[], uuid[], text[], timestamptz, boolean[], integer[], uuid[], boolean[], text[], text[], numeric[], numeric[]) IS
    'pgadmit_settle for a batch on a hot counter: commits without waiting for the flush (locks released at once), then returns after a second, durable commit has flushed it.';

DROP PROCEDURE pgadmit_hot_commit();
