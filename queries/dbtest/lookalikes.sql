-- name: LookalikeGuardRoutines :many
-- For each function, aggregate or window function of oids: its schema, its
-- name, its signature, its parameter types (pronargs of them, variadic
-- included, OUT parameters not) by OID and by name, and whether one is a
-- pseudo-type (polymorphic like anyarray or anyelement, or "any"): a call
-- that needs a pseudo-type matches a function of another schema that takes
-- the argument's own type less well than that one matches the call.
-- Locks: none (catalog read).
-- Index: pg_proc_oid_index; pg_type_oid_index per parameter.
SELECT p.oid::oid                         AS oid,
       p.pronamespace::regnamespace::text AS schema_name,
       p.proname::text                    AS name,
       p.oid::regprocedure::text          AS signature,
       p.proargtypes::oid[]               AS arg_types,
       p.proargtypes::oid[]::regtype[]::text[] AS arg_type_names,
       EXISTS (
           SELECT 1
           FROM pg_catalog.unnest(p.proargtypes::oid[]) AS a(type_oid)
           JOIN pg_catalog.pg_type AS y ON y.oid = a.type_oid
           WHERE y.typtype = 'p'::"char"
       )::boolean                         AS pseudo
FROM pg_catalog.pg_proc AS p
WHERE p.oid = ANY (@oids::oid[])
ORDER BY p.oid;

-- name: LookalikeGuardOperators :many
-- For each operator of oids: its schema, its name, its signature, its
-- operand types by OID and by name (0 and - for the left one of a prefix
-- operator), and whether one is a pseudo-type (anyarray, anyelement...), as
-- LookalikeGuardRoutines for functions.
-- Locks: none (catalog read).
-- Index: pg_operator_oid_index; pg_type_oid_index per operand.
SELECT o.oid::oid                         AS oid,
       o.oprnamespace::regnamespace::text AS schema_name,
       o.oprname::text                    AS name,
       o.oid::regoperator::text           AS signature,
       ARRAY[o.oprleft, o.oprright]::oid[] AS arg_types,
       ARRAY[o.oprleft, o.oprright]::regtype[]::text[] AS arg_type_names,
       EXISTS (
           SELECT 1
           FROM pg_catalog.pg_type AS y
           WHERE y.oid IN (o.oprleft, o.oprright)
             AND y.typtype = 'p'::"char"
       )::boolean                         AS pseudo
FROM pg_catalog.pg_operator AS o
WHERE o.oid = ANY (@oids::oid[])
ORDER BY o.oid;

-- name: LookalikeProbeLoose :one
-- Deliberately loose calls, one of each kind that the guard of
-- db/lookalike_guard_test.go flags in a statement of queries/*.sql: an
-- integer for hashtextextended's bigint seed (an implicit cast), unnest and
-- array_agg (polymorphic), a quoted literal for date_bin's timestamptz
-- origin (taken as of unknown type), numeric > integer (an implicit cast
-- of the right operand). LookalikeProbeExact computes the same values with
-- exact calls.
-- Locks: none.
-- Index: none (no table).
SELECT hashtextextended('pgadmit', 0)::bigint AS hash,
       (SELECT array_agg(u.x ORDER BY u.x) FROM unnest('{3,1,2}'::integer[]) AS u(x))::integer[] AS sorted,
       date_bin('15 minutes'::interval, '2001-02-03 04:35:06+00'::timestamptz, '2001-01-01 00:00:00+00')::timestamptz AS binned,
       (1.5::numeric > 1)::boolean AS above;

-- name: LookalikeProbeExact :one
-- LookalikeProbeLoose's values, computed with calls that cannot resolve to
-- another schema's function or operator: given their parameters' own types
-- (hashtextextended, date_bin), or naming pg_catalog (array_agg, unnest, and
-- the > of a numeric and an integer, an implicit cast then harmless).
-- TestStatementsCallBuiltinsExactlyFlagsLooseCalls checks that the guard
-- flags all of LookalikeProbeLoose's calls and none of these.
-- Locks: none.
-- Index: none (no table).
SELECT hashtextextended('pgadmit'::text, 0::bigint)::bigint AS hash,
       (SELECT pg_catalog.array_agg(u.x ORDER BY u.x) FROM pg_catalog.unnest('{3,1,2}'::integer[]) AS u(x))::integer[] AS sorted,
       date_bin('15 minutes'::interval, '2001-02-03 04:35:06+00'::timestamptz, '2001-01-01 00:00:00+00'::timestamptz)::timestamptz AS binned,
       (1.5::numeric OPERATOR(pg_catalog.>) 1)::boolean AS above;

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- The catalog reads and probes of the guard that keeps every call of a
-- PostgreSQL function or operator in queries/*.sql exact
-- (db/lookalike_guard_test.go, docs/lookalikes.md).
