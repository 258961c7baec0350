-- name: SchemaFingerprint :many
-- One row per schema object of the current schema (pgadmit's goose version and
-- lock tables excepted): its kind, a name that holds no OID, and a detail
-- that changes whenever its definition does (types, defaults, nullability,
-- constraint and index definitions, function signatures with an md5 of their
-- bodies and settings, triggers, views, sequences, types, comments). A
-- column's position counts live columns only, so a dropped one leaves no gap.
-- Locks: none (catalog read).
-- Index: catalog indexes.
WITH rels AS (
    SELECT c.oid, c.relname::text AS relname, c.relkind::text AS relkind
    FROM pg_catalog.pg_class AS c
    WHERE c.relnamespace = current_schema()::regnamespace
      AND c.relname::text NOT LIKE 'pgadmit\_goose\_%'
)
SELECT 'relation'::text AS kind, r.relname AS name,
       (r.relkind || ' options=' || coalesce(array_to_string(c.reloptions, ','), '')
        || ' persistence=' || c.relpersistence::text
        || ' comment=' || coalesce(obj_description(r.oid, 'pg_class'), '<none>'))::text AS detail
FROM rels AS r
JOIN pg_catalog.pg_class AS c ON c.oid = r.oid
UNION ALL
SELECT 'column', r.relname || '.' || a.attname::text,
       (format_type(a.atttypid, a.atttypmod)
        || ' notnull=' || a.attnotnull::text
        || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '<none>')
        || ' identity=' || a.attidentity::text || ' generated=' || a.attgenerated::text
        || ' collation=' || coalesce((SELECT co.collname::text FROM pg_catalog.pg_collation AS co
                                      WHERE co.oid = a.attcollation), '<none>')
        || ' position=' || (SELECT count(*) FROM pg_catalog.pg_attribute AS b
                            WHERE b.attrelid = a.attrelid AND b.attnum > 0 AND b.attnum <= a.attnum
                              AND NOT b.attisdropped)::text
        || ' comment=' || coalesce(col_description(r.oid, a.attnum), '<none>'))::text
FROM rels AS r
JOIN pg_catalog.pg_attribute AS a ON a.attrelid = r.oid
LEFT JOIN pg_catalog.pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attnum > 0
  AND NOT a.attisdropped
  AND r.relkind IN ('r', 'p', 'v', 'm', 'c', 'f')
UNION ALL
SELECT 'constraint', r.relname || '.' || k.conname::text,
       (pg_get_constraintdef(k.oid)
        || ' deferrable=' || k.condeferrable::text || ' deferred=' || k.condeferred::text
        || ' validated=' || k.convalidated::text
        || ' comment=' || coalesce(obj_description(k.oid, 'pg_constraint'), '<none>'))::text
FROM pg_catalog.pg_constraint AS k
JOIN rels AS r ON r.oid = k.conrelid
UNION ALL
SELECT 'index', r.relname,
       (pg_get_indexdef(r.oid) || ' valid=' || x.indisvalid::text
        || ' comment=' || coalesce(obj_description(r.oid, 'pg_class'), '<none>'))::text
FROM rels AS r
JOIN pg_catalog.pg_index AS x ON x.indexrelid = r.oid
UNION ALL
SELECT 'view', r.relname, pg_get_viewdef(r.oid)::text
FROM rels AS r
WHERE r.relkind IN ('v', 'm')
UNION ALL
SELECT 'sequence', r.relname,
       (format_type(s.seqtypid, NULL) || ' start=' || s.seqstart::text || ' increment=' || s.seqincrement::text
        || ' min=' || s.seqmin::text || ' max=' || s.seqmax::text || ' cycle=' || s.seqcycle::text)::text
FROM rels AS r
JOIN pg_catalog.pg_sequence AS s ON s.seqrelid = r.oid
UNION ALL
SELECT 'trigger', r.relname || '.' || t.tgname::text,
       (pg_get_triggerdef(t.oid) || ' enabled=' || t.tgenabled::text
        || ' comment=' || coalesce(obj_description(t.oid, 'pg_trigger'), '<none>'))::text
FROM pg_catalog.pg_trigger AS t
JOIN rels AS r ON r.oid = t.tgrelid
WHERE NOT t.tgisinternal
UNION ALL
SELECT 'function', p.proname::text || '(' || pg_get_function_identity_arguments(p.oid) || ')',
       (p.prokind::text || ' returns=' || coalesce(pg_get_function_result(p.oid), '<none>')
        || ' args=' || pg_get_function_arguments(p.oid)
        || ' language=' || (SELECT l.lanname::text FROM pg_catalog.pg_language AS l WHERE l.oid = p.prolang)
        || ' volatility=' || p.provolatile::text || ' strict=' || p.proisstrict::text
        || ' security_definer=' || p.prosecdef::text || ' parallel=' || p.proparallel::text
        || ' config=' || coalesce(array_to_string(p.proconfig, ','), '')
        || ' body_md5=' || md5(p.prosrc)
        || ' comment=' || coalesce(obj_description(p.oid, 'pg_proc'), '<none>'))::text
FROM pg_catalog.pg_proc AS p
WHERE p.pronamespace = current_schema()::regnamespace
UNION ALL
SELECT 'type', y.typname::text,
       (y.typtype::text
        || ' labels=' || coalesce((SELECT string_agg(e.enumlabel::text, ',' ORDER BY e.enumsortorder)
                                   FROM pg_catalog.pg_enum AS e WHERE e.enumtypid = y.oid), '')
        || ' base=' || coalesce(format_type(nullif(y.typbasetype, 0), NULL), '')
        || ' comment=' || coalesce(obj_description(y.oid, 'pg_type'), '<none>'))::text
FROM pg_catalog.pg_type AS y
WHERE y.typnamespace = current_schema()::regnamespace
  AND y.typtype IN ('e', 'd')
ORDER BY 1, 2, 3;

-- name: SchemaMayCreate :one
-- Whether the session's role may create objects in the current schema.
-- Locks: none (catalog read).
-- Index: pg_namespace_oid_index.
SELECT has_schema_privilege(current_schema(), 'CREATE') AS may_create;

-- name: SchemaTablePrivileges :many
-- The privileges the session's role holds on the tables of the current schema, those of
-- the groups it belongs to included: one row per table and privilege, in that order (the
-- test of docs/privileges.sql's roles, which must hold what the file grants and no more).
-- Locks: none (catalog read).
-- Index: none (a scan of pg_class, a few hundred rows).
SELECT c.relname::text AS table_name, p.privilege::text AS privilege
FROM pg_catalog.pg_class AS c
CROSS JOIN pg_catalog.unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']::text[]) AS p (privilege)
WHERE c.relnamespace = current_schema()::regnamespace
  AND c.relkind IN ('r', 'p')
  AND pg_catalog.has_table_privilege(c.oid, p.privilege)
ORDER BY 1, 2;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Catalog reads for the migration tests: a fingerprint of everything pgadmit's
-- migrations create in the current schema, so that a test can check that each
-- Down restores exactly what the same version's Up left; and what a role may do in
-- that schema (create objects, read and write its tables), for the tests of
-- docs/privileges.sql's roles.
