-- Connection pooler check: whether consecutive transactions of one client
-- connection run in one server session (a direct connection, or a pooler in
-- session mode) or may run in different ones (a pooler in transaction mode,
-- such as PgBouncer with pool_mode = transaction), where session state such
-- as a prepared statement does not carry over.

-- name: PoolerBackendPid :one
-- The process id of the server backend (the session) running this
-- statement.
-- Locks: none.
-- Index: none.
SELECT pg_backend_pid()::integer AS pid;
