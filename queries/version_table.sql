-- name: VersionTableElsewhere :one
-- Where pgadmit's version table (@table_name: pgadmit_goose_version) is,
-- besides the schema this session reads it from and would create it in:
-- current_schema, that schema (the first schema of the search_path that
-- exists; empty when none does); search_path, the setting as this session
-- has it; other_schemas, every other schema of this database that holds a
-- table of that name, by name (none: an empty array); without_usage, those
-- of them on which this session's role (current_user, role_name) has no
-- USAGE, which PostgreSQL leaves out of its search_path even where the
-- setting names them (has_schema_privilege: the schema's ACL and the
-- role's memberships, from the catalogs). `pgadmit` reads it
-- when it sees schema version 0, to tell a database pgadmit never migrated
-- from one migrated into a schema this connection's search_path leaves out
-- (or puts after another, or that this role may not use). It reads the
-- catalogs only, which every role may read: it names such a schema whether
-- or not this role may use it, and reads no table of pgadmit's, in any
-- schema.
-- Locks: none on any table (catalog reads, MVCC).
-- Index: pg_class_relname_nsp_index (by relname); pg_namespace, a small
-- catalog, read whole (or probed by pg_namespace_oid_index where it is
-- large).
WITH elsewhere AS (
    SELECT n.nspname::text AS schema_name,
           pg_catalog.has_schema_privilege(n.oid, 'USAGE'::text) AS usable
    FROM pg_catalog.pg_class AS c
    JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
    WHERE c.relname = @table_name::name
      AND c.relkind IN ('r', 'p')
      AND n.nspname IS DISTINCT FROM pg_catalog.current_schema()
)
SELECT coalesce(pg_catalog.current_schema()::text, '')::text AS current_schema,
       pg_catalog.current_setting('search_path'::text)::text AS search_path,
       current_user::text AS role_name,
       ARRAY(SELECT e.schema_name FROM elsewhere AS e ORDER BY e.schema_name)::text[] AS other_schemas,
       ARRAY(SELECT e.schema_name FROM elsewhere AS e WHERE NOT e.usable ORDER BY e.schema_name)::text[] AS without_usage;

-- name: VersionTableInCurrentSchema :one
-- Whether pgadmit's version table (@table_name: pgadmit_goose_version) is in
-- this session's current schema, the one goose reads it from and would
-- create it in: false when the session has none (no schema of its
-- search_path exists, or its role has USAGE on none of them, as a role
-- whose search_path is pgadmit's schema alone without that grant). goose's
-- own check counts a table of that name in any schema then, which the
-- session cannot read (42P01). schema.Version and schema.Status read it
-- before the version table.
-- Locks: none on any table (catalog reads, MVCC).
-- Index: pg_class_relname_nsp_index (by relname); pg_namespace is read
-- whole (a small catalog), as in VersionTableElsewhere.
SELECT EXISTS (
    SELECT 1
    FROM pg_catalog.pg_class AS c
    JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
    WHERE c.relname = @table_name::name
      AND c.relkind IN ('r', 'p')
      AND n.nspname = pg_catalog.current_schema()
) AS present;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- pgadmit's version table as the catalogs see it: what the CLI reads to say
-- where pgadmit is when the search_path of its connection does not lead to
-- it. The ratelimit package never runs it. goose itself (schema.Version,
-- schema.Migrate) looks for the table in the session's current schema only.
