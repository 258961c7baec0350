-- name: SetMaintenanceSettings :exec
-- Sets what a maintenance transaction (a batch of Recover or Prune, Doctor,
-- inspect) runs with, for the current transaction only, run first in it:
--
-- jit off. These statements are planned for large tables (the ledgers, the
-- tasks, every counter), so their costs pass jit_above_cost, while each
-- reads a bounded batch, or once an operator's full scan: compiling cost
-- more than it saved (a Doctor over 1.6 M counters, 1 M reservations and
-- 300 k tasks spent 11.9 s of its 40.7 s in JIT compilation). The server
-- checks jit when it plans a statement and again when it runs one, so a
-- statement prepared before (pgx's statement cache) is not compiled either.
--
-- lock_timeout, when @timeout_ms is positive: @timeout_ms milliseconds, its
-- unit (callers round a bound up to a whole one, internal/locktimeout: a
-- positive bound never becomes 0, which is none), so that a statement after
-- it that waits longer than that for a lock (a table a migration holds
-- ACCESS EXCLUSIVE) fails with SQLSTATE 55P03, lock_not_available, instead
-- of waiting on. Whole milliseconds, not float seconds: a thousand times
-- those is not always whole, and was set 1 ms longer (1.132 s as 1133 ms).
-- A bound past lock_timeout's range (an int of milliseconds, about 24.8
-- days) is its largest value, not an error. 0 (or less) leaves lock_timeout
-- as it is: the server's own (a role's or a database's setting).
--
-- Transaction-local (set_config(..., true)): behind a transaction-pooling
-- proxy a session-level setting would stay on a server session that other
-- clients get next, and PgBouncer refuses it as a startup parameter. Never
-- sent by the admission paths (Reserve, Commit, tasks...): there the
-- planner's costs are those of a few rows.
-- Locks: none.
-- Index: none (no table).
SELECT pg_catalog.set_config('jit', 'off', true) AS jit,
       CASE WHEN @timeout_ms::bigint > 0
            THEN pg_catalog.set_config('lock_timeout', least(@timeout_ms::bigint, 2147483647)::text || 'ms', true)
       END AS lock_timeout;
