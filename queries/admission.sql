-- Admission and settlement: typed calls of the PL/pgSQL functions
-- pgadmit_reserve and pgadmit_settle (schema/00002_admission_functions.sql),
-- whose bodies say, statement by statement, what they lock and which index
-- serves them. One call is one statement: one round trip, and one implicit
-- transaction unless the caller runs it inside its own.

-- name: AdmissionReserve :many
-- Decides a batch of admissions, each all or nothing, in arrival order: one
-- entry per admission in @task_ids and @attempt_ids (NULL elements for
-- none); window limits in the @w_* arrays and concurrency limits in the @c_*
-- arrays, grouped by admission in admission order (@w_admission and
-- @c_admission give each limit's 1-based admission). Returns one row per
-- limit with the values its decision used, on the database's clock; an
-- admitted limit has its grant_id. Refused admissions write nothing.
-- Locks: window counter rows FOR UPDATE in primary-key order, then
-- transaction advisory locks of concurrency scopes in lock-key order, then
-- new reservation and lease rows (the lock order).
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

-- name: AdmissionSettle :many
-- Commits (@status 'committed', with @actual_amounts) or releases
-- ('released') the given open reservations, moving their amounts in their
-- counters, and releases the given unreleased leases; @reason and
-- @lease_reason are recorded on them. @scope_types .. @window_starts name
-- each reservation's counter as the grant says (the call fails, writing
-- nothing, when a reservation draws on another one); NULL reads them from
-- the reservations. Idempotent: anything already settled
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
         @actual_amounts::numeric[], @status::text, sqlc.narg('reason')::text,
         @lease_ids::uuid[], @lease_reason::text, sqlc.narg('now')::timestamptz
     ) AS s;
