-- name: AdmissionReserveOne :one
-- Decides one admission of one window limit: an upsert that adds the
-- amount to the window's counter row (creating it) only when it fits, and
-- the reservation row, in one statement. Returns the values the decision
-- used, on the database's clock; grant_id is NULL when refused (and then
-- nothing was written).
-- Locks: the counter row FOR NO KEY UPDATE (by the upsert, as in
-- AdmissionReserve; the function's own comment says FOR UPDATE, which
-- pgrowlocks does not show), then the new reservation row (FOR KEY SHARE
-- on the task and attempt rows, by the foreign keys), then,
-- for a task, pg_advisory_xact_lock_shared on its fence key
-- (pgadmit_task_recheck).
-- Index: gateway_rate_limit_counters_pkey; gateway_tasks_pkey and
-- gateway_task_attempts_pkey for the task guards.
SELECT r.fits::boolean               AS fits,
       r.grant_id::uuid              AS grant_id,
       r.current_value::numeric      AS current_value,
       r.reserved_value::numeric     AS reserved_value,
       r.window_start::timestamptz   AS window_start,
       r.reset_at::timestamptz       AS reset_at,
       r.db_now::timestamptz         AS db_now,
       r.refusal::text               AS refusal
FROM pgadmit_reserve_one(
         sqlc.narg('task_id')::uuid, sqlc.narg('attempt_id')::uuid,
         @scope_type::text, @scope_key::text, @metric::text, @window_seconds::integer,
         @limit_value::numeric, @amount::numeric, sqlc.narg('now')::timestamptz
     ) AS r;

-- name: AdmissionTaskFence :one
-- Why an admission for this task and attempt must be refused (empty when
-- it may go on), for one that sends no other statement: every limit of it
-- was admitted from a Local block this process holds. The same test
-- pgadmit_reserve makes of every admission for a task.
-- Locks: none (reads).
-- Index: gateway_tasks_pkey; gateway_task_attempts_pkey.
SELECT pgadmit_task_refusal(sqlc.narg('task_id')::uuid, sqlc.narg('attempt_id')::uuid)::text AS refusal;

-- name: AdmissionReserve :many
-- Decides a batch of admissions, each all or nothing, in arrival order: one
-- entry per admission in @task_ids and @attempt_ids (NULL elements for
-- none); window limits in the @w_* arrays and concurrency limits in the @c_*
-- arrays, grouped by admission in admission order (@w_admission and
-- @c_admission give each limit's 1-based admission). Returns one row per
-- limit with the values its decision used, on the database's clock; an
-- admitted limit has its grant_id. Refused admissions write nothing, except
-- that a counter row the batch found missing stays behind, empty.
-- Locks: window counter rows in primary-key order (the lock order), by an
-- upsert, which locks them FOR NO KEY UPDATE (as pg_locks and pgrowlocks
-- show; it excludes the FOR UPDATE of settlement all the same: no foreign
-- key references a counter), then transaction advisory locks of concurrency scopes in lock-key order, then
-- new reservation and lease rows (the lock order; FOR KEY SHARE on their
-- task and attempt rows, by the foreign keys), then
-- pg_advisory_xact_lock_shared on the fence key of each admitted task, in
-- key order (pgadmit_task_recheck).
-- Index: gateway_rate_limit_counters_pkey; gateway_concurrency_leases_live_scope_idx;
-- gateway_tasks_pkey and gateway_task_attempts_pkey for task guards.
SELECT r.admission::integer          AS admission,
       r.is_lease::boolean           AS is_lease,
       r.ord::integer                AS ord,
       r.fits::boolean               AS fits,
       r.grant_id::uuid              AS grant_id,
       r.current_value::numeric      AS current_value,
       r.reserved_value::numeric     AS reserved_value,
       r.window_start::timestamptz   AS window_start,
       r.reset_at::timestamptz       AS reset_at,
       r.db_now::timestamptz         AS db_now,
       r.refusal::text               AS refusal
FROM pgadmit_reserve(
         @task_ids::uuid[], @attempt_ids::uuid[],
         @w_admission::integer[], @w_scope_types::text[], @w_scope_keys::text[], @w_metrics::text[],
         @w_window_seconds::integer[], @w_limit_values::numeric[], @w_amounts::numeric[],
         @c_admission::integer[], @c_scope_types::text[], @c_scope_keys::text[],
         @c_limit_values::numeric[], @c_amounts::numeric[], @c_ttl_seconds::integer[],
         sqlc.narg('now')::timestamptz
     ) AS r;

-- name: AdmissionReserveWindows :many
-- Decides a batch of task-less admissions of one window limit each (element
-- i of the arrays is admission i), in arrival order, with the same outcome
-- as AdmissionReserve and mostly in one statement: the sum a batch asks of
-- a counter is taken at once where it fits whole. Returns one row per
-- admission; refused admissions write nothing, except that a counter row
-- the batch found missing stays behind, empty.
-- Locks: the counter rows in primary-key order (the lock order), FOR NO KEY
-- UPDATE by an upsert (as AdmissionReserve), then the new reservation rows.
-- Index: gateway_rate_limit_counters_pkey.
SELECT r.admission::integer          AS admission,
       r.is_lease::boolean           AS is_lease,
       r.ord::integer                AS ord,
       r.fits::boolean               AS fits,
       r.grant_id::uuid              AS grant_id,
       r.current_value::numeric      AS current_value,
       r.reserved_value::numeric     AS reserved_value,
       r.window_start::timestamptz   AS window_start,
       r.reset_at::timestamptz       AS reset_at,
       r.db_now::timestamptz         AS db_now,
       r.refusal::text               AS refusal
FROM pgadmit_reserve_windows(
         @scope_types::text[], @scope_keys::text[], @metrics::text[],
         @window_seconds::integer[], @limit_values::numeric[], @amounts::numeric[]
     ) AS r;

-- name: AdmissionSettleOne :one
-- Settles one reservation whose counter the grant names: @status
-- 'committed' with @actual_amount, or 'released'; @reason recorded on it.
-- Idempotent: one no longer open (or drawing on another counter than the
-- one named) comes back with settled = false and is left alone; an id that
-- names no row comes back with an empty status.
-- Locks: the counter row FOR UPDATE, then the reservation row (the lock
-- order).
-- Index: gateway_rate_limit_counters_pkey; gateway_rate_limit_reservations_pkey.
SELECT s.settled::boolean           AS settled,
       coalesce(s.status, '')::text AS status,
       coalesce(s.metric, '')::text AS metric,
       coalesce(s.reserved_amount, 0)::numeric AS reserved_amount,
       coalesce(s.actual_amount, 0)::numeric   AS actual_amount
FROM pgadmit_settle_one(
         @reservation_id::uuid, @scope_type::text, @scope_key::text, @metric::text,
         @window_seconds::integer, @window_start::timestamptz,
         @status::text, @actual_amount::numeric, @reason::text, sqlc.narg('now')::timestamptz
     ) AS s;

-- name: AdmissionSettle :many
-- Settles the given open reservations, each to its status in @statuses
-- ('committed' with its @actual_amounts, or 'released') with its reason in
-- @reasons, moving their amounts in their counters, and releases the given
-- unreleased leases, each with its reason in @lease_reasons. @scope_types .. @window_starts name
-- each reservation's counter as the grant says (a reservation that draws
-- on another one is left open and comes back with settled = false and its
-- status, reserved); NULL reads them from the reservations. Idempotent: anything already settled
-- comes back with settled = false and is left alone; a reservation id that
-- names no row comes back with a NULL status. One row per id, reservations
-- first (is_lease false), each with its 1-based position.
-- Locks: the counters of the still-open reservations FOR UPDATE in
-- primary-key order (the lock order), then the reservation and lease rows.
-- Index: gateway_rate_limit_reservations_pkey; gateway_rate_limit_counters_pkey;
-- gateway_concurrency_leases_pkey.
SELECT s.is_lease::boolean          AS is_lease,
       s.ord::integer               AS ord,
       s.id::uuid                   AS id,
       s.settled::boolean           AS settled,
       coalesce(s.status, '')::text AS status,
       coalesce(s.metric, '')::text AS metric,
       coalesce(s.reserved_amount, 0)::numeric AS reserved_amount,
       coalesce(s.actual_amount, 0)::numeric   AS actual_amount
FROM pgadmit_settle(
         @reservation_ids::uuid[], @scope_types::text[], @scope_keys::text[], @metrics::text[],
         @window_seconds::integer[], @window_starts::timestamptz[],
         @statuses::text[], @actual_amounts::numeric[], @reasons::text[],
         @lease_ids::uuid[], @lease_reasons::text[], sqlc.narg('now')::timestamptz
     ) AS s;

-- name: AdmissionHotCommit :exec
-- Sent after the statement of a batch on a hot counter (AdmissionReserve,
-- AdmissionReserveWindows or AdmissionSettle), in the same pipeline and
-- implicit transaction, never in a transaction block: commits that
-- statement's transaction without waiting for its flush, then returns
-- after a second, durable commit has flushed it
-- (schema/00012_hot_commit.sql). The batch's rows reach the client with
-- its outcome (the server sends them at the Sync, or with its error).
-- Locks: none of its own; its commit releases the batch's.
-- Index: none.
CALL pgadmit_hot_commit();

-- About this file (here at its end, where sqlc gives it to no query; see db/doc.go):
--
-- Admission and settlement: typed calls of the PL/pgSQL functions that
-- schema/00003_admission_functions.sql created, whose bodies say, statement
-- by statement, what they lock and which index serves them. Later
-- migrations replaced most of them: the definition in force is that of the
-- last migration that defines the function, as \sf in psql shows: 00021
-- for all but pgadmit_settle_one (00014). 00021 only made their calls of
-- PostgreSQL's functions exact; their bodies, plans and locks are those of
-- pgadmit_reserve 00018, pgadmit_reserve_one 00011, pgadmit_task_recheck
-- 00020, pgadmit_settle 00016 and pgadmit_reserve_windows 00007. The *One calls take scalars (one admission of one window
-- limit, one reservation); the others take batches. One call is one
-- statement: one round trip, and one implicit transaction unless the caller
-- runs it inside its own.
