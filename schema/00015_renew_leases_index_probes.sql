-- Lease renewal planned to index probes, as the other array functions are.
--
-- pgadmit_renew_leases (00008, redefined by 00014) takes an array of lease
-- ids, like pgadmit_reserve and pgadmit_settle (00003), but was left
-- without their function-level planner settings. On a table the planner
-- has no statistics for (a new deployment before autovacuum's first
-- ANALYZE, or one with autovacuum off) it estimated its test of the
-- renewed row to match almost nothing and joined each lease to a
-- sequential scan of the live ones: renewing 1,000 leases took 1.0-1.1 s
-- (up to 7 s on a loaded host) instead of 10-11 ms. It now has the
-- settings of pgadmit_settle: generic plans, built to primary-key and
-- tuple-id probes whatever the tables' statistics say. Its body does not
-- change.

-- +goose Up
SET LOCAL lock_timeout = '5s';

ALTER FUNCTION pgadmit_renew_leases(uuid[], integer[], timestamptz)
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off
    SET enable_hashjoin = off
    SET enable_mergejoin = off;

-- +goose Down
SET LOCAL lock_timeout = '5s';

ALTER FUNCTION pgadmit_renew_leases(uuid[], integer[], timestamptz) RESET ALL;
