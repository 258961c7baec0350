-- name: PoolerBackendPid :one
-- The process id of the server backend (the session) running this
-- statement.
-- Locks: none.
-- Index: none.
SELECT pg_backend_pid()::integer AS pid;

-- name: PoolerStatementPrepared :one
-- Whether this session holds a prepared statement named @name: one that
-- this connection has just prepared by that name, unless a pooler in
-- between carries prepared statements over under names of its own.
-- Locks: none.
-- Index: none (pg_prepared_statements lists this session's statements).
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_prepared_statements AS s WHERE s.name = @name::text) AS prepared;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Connection pooler check: whether consecutive transactions of one client
-- connection run in one server session (a direct connection, or a pooler in
-- session mode) or may run in different ones (a pooler in transaction mode,
-- such as PgBouncer with pool_mode = transaction), where session state such
-- as a prepared statement does not carry over.
