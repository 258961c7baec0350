-- Least privilege for pgadmit: two group roles, one for gateways and one for maintenance.
--
-- pgadmit_gateway: what a gateway process needs for every method of ratelimit.Limiter
--   (admissions, Local blocks, leases, tasks and their events) and for httpadmit. It deletes
--   nothing but a task's queue places. Doctor and the CLI's doctor and inspect only read: it
--   runs them too.
-- pgadmit_maintenance: what Maintenance (Recover, Prune, Doctor) and the CLI's recover, prune,
--   doctor and inspect need: they read and settle what gateways left, and delete history.
-- Neither may create, alter or drop anything (the script revokes CREATE on pgadmit's schema from
-- PUBLIC, as PostgreSQL 15 does on public): migrations run as the role that owns pgadmit's tables
-- (schema.Migrate, pgadmit migrate, goose), which needs no grant from here.
--
-- Run it as a superuser, or as the role that owns pgadmit's tables and their schema if it has
-- CREATEROLE (or the two roles exist already), in each database pgadmit was migrated into,
-- with the search_path its migrations ran under; run it again after each upgrade (GRANT is idempotent: a table a new
-- migration adds gets its grants then). To use names of your own, replace the two role names
-- throughout. Then give your login roles the group that fits them:
--
--   CREATE ROLE gateway LOGIN PASSWORD '...' IN ROLE pgadmit_gateway;
--   CREATE ROLE sweeper LOGIN PASSWORD '...' IN ROLE pgadmit_maintenance;
--
-- Functions need no grant: by default PostgreSQL lets every role execute them, and they run
-- with the caller's privileges (none is SECURITY DEFINER), so these grants bound what they may
-- do too. They set no search_path of their own: they find pgadmit's tables and functions through
-- the caller's, and call PostgreSQL's own by exact types or by their pg_catalog name (migration
-- 00021), so that no lookalike on the path runs in their place; keep the schemas on a gateway's
-- search_path closed to roles you do not trust, as the REVOKE below does for pgadmit's.
-- Advisory locks, pg_logical_emit_message (hot batches) and cancel requests of a role's own
-- sessions need no privilege. pgadmit's tests run every flow as these two roles
-- (TestLeastPrivilegeRolesRunEveryFlow, TestMaintenanceCommandsRunAsTheMaintenanceRole), and
-- each privilege granted here fails one of them when it alone is revoked.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pgadmit_gateway') THEN
        CREATE ROLE pgadmit_gateway NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pgadmit_maintenance') THEN
        CREATE ROLE pgadmit_maintenance NOLOGIN;
    END IF;
    -- The schema pgadmit was migrated into: the first of the search_path (public, or one of
    -- its own).
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO pgadmit_gateway, pgadmit_maintenance', current_schema());
    -- And no role may create in it by default: PostgreSQL before 15 lets every role create in
    -- public. A role that may create there can plant a function or an operator that a call of
    -- pgadmit's matches more closely than PostgreSQL's own (an integer where pg_catalog's takes
    -- a bigint), which then runs with the privileges of whoever calls pgadmit: a gateway could
    -- run its code as the maintenance role or as the tables' owner. A role of yours that must
    -- create there keeps a grant of its own (GRANT CREATE ON SCHEMA ... TO that_role).
    EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC', current_schema());
END
$$;

-- Admission: counters, the reservation ledger, concurrency leases and Local blocks.
GRANT SELECT, INSERT, UPDATE ON
    gateway_rate_limit_counters,
    gateway_rate_limit_reservations,
    gateway_concurrency_leases,
    gateway_rate_limit_allotments
    TO pgadmit_gateway;

-- Tasks: created, claimed, heartbeated and finished by gateways and workers. (Event ids are an
-- identity column: its sequence needs no grant.)
GRANT SELECT, INSERT, UPDATE ON
    gateway_tasks,
    gateway_task_attempts
    TO pgadmit_gateway;
GRANT SELECT, INSERT ON gateway_task_events TO pgadmit_gateway;
-- A task's queue places: taken when it is created, given back when it finishes.
GRANT SELECT, INSERT, DELETE ON gateway_task_admissions TO pgadmit_gateway;

-- Maintenance settles and releases what gateways left (open reservations, expired leases, the
-- blocks of dead holders), fails or requeues their expired tasks (writing an event), and
-- deletes history: it inserts into no ledger.
GRANT SELECT, UPDATE, DELETE ON
    gateway_rate_limit_counters,
    gateway_rate_limit_reservations,
    gateway_concurrency_leases,
    gateway_rate_limit_allotments,
    gateway_tasks
    TO pgadmit_maintenance;
-- A task's attempts go with it (ON DELETE CASCADE, which runs as the table's owner).
GRANT SELECT, UPDATE ON gateway_task_attempts TO pgadmit_maintenance;
GRANT SELECT, INSERT, DELETE ON gateway_task_events TO pgadmit_maintenance;
GRANT SELECT, DELETE ON gateway_task_admissions TO pgadmit_maintenance;
-- One run at a time per job (leases, given up at the end of a run), and where the last prune
-- of events stopped (cursors, one row per job, kept).
GRANT SELECT, INSERT, UPDATE, DELETE ON gateway_maintenance_leases TO pgadmit_maintenance;
GRANT SELECT, INSERT, UPDATE ON gateway_maintenance_cursors TO pgadmit_maintenance;
-- The schema's version: the CLI reads it before it runs a command, and schema.Migrate at a
-- gateway's start-up (the README's quick start) reads it to find nothing pending. Neither role
-- may migrate: with a migration pending, Migrate fails at once (insufficient_privilege on the
-- lock table); apply it as the tables' owner first (pgadmit migrate up).
GRANT SELECT ON pgadmit_goose_version TO pgadmit_gateway, pgadmit_maintenance;
