-- +goose NO TRANSACTION
-- Prune reads only reservations and allotments whose window has ended.
--
-- Prune deletes a finished reservation once its window ended before the
-- cutoff and its counter row is gone. It used to walk every reservation
-- whose window *began* before the cutoff, in (window_start, id) order: the
-- ledger of a window longer than the retention (a day's or a month's token
-- budget, pruned every hour) began before the cutoff and has not ended, so
-- each run read all of it again to delete none of it, a cost that grew with
-- the longest window's traffic.
--
-- With the window length leading the index, Prune walks one length at a
-- time and stops where that length's windows stop having ended
-- (window_start < cutoff - window_seconds): what it reads is what it
-- deletes, apart from the rare row whose counter is still kept. The new
-- index replaces the old one, so admissions write no more index entries
-- than before (a reservation insert writes 4 more bytes of key).
--
-- Allotments had the same walk (window_start, id); a block's expires_at is
-- its window's end, so their index leads with that instead.
--
-- Built CONCURRENTLY (no write blocked while it builds), so NO TRANSACTION,
-- one statement at a time; dropped first if it exists, so that running this
-- again after an interrupted build replaces the invalid index it left.

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS gateway_rate_limit_reservations_length_window_idx;
CREATE INDEX CONCURRENTLY gateway_rate_limit_reservations_length_window_idx
    ON gateway_rate_limit_reservations (window_seconds, window_start, id);
COMMENT ON INDEX gateway_rate_limit_reservations_length_window_idx IS
    'Serves prune: per window length, the reservations of windows that ended before a cutoff, in keyset pages; and the window lengths present (a loose index scan).';
DROP INDEX CONCURRENTLY IF EXISTS gateway_rate_limit_reservations_window_idx;

DROP INDEX CONCURRENTLY IF EXISTS gateway_rate_limit_allotments_expiry_idx;
CREATE INDEX CONCURRENTLY gateway_rate_limit_allotments_expiry_idx
    ON gateway_rate_limit_allotments (expires_at, id);
COMMENT ON INDEX gateway_rate_limit_allotments_expiry_idx IS
    'Serves prune: returned blocks of windows that ended before a cutoff, in (expires_at, id) order.';
DROP INDEX CONCURRENTLY IF EXISTS gateway_rate_limit_allotments_window_idx;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS gateway_rate_limit_reservations_window_idx;
CREATE INDEX CONCURRENTLY gateway_rate_limit_reservations_window_idx
    ON gateway_rate_limit_reservations (window_start, id);
COMMENT ON INDEX gateway_rate_limit_reservations_window_idx IS
    'Serves prune: the reservations of windows that began before a cutoff, in keyset pages; window starts only grow, so inserts append.';
DROP INDEX CONCURRENTLY IF EXISTS gateway_rate_limit_reservations_length_window_idx;

DROP INDEX CONCURRENTLY IF EXISTS gateway_rate_limit_allotments_window_idx;
CREATE INDEX CONCURRENTLY gateway_rate_limit_allotments_window_idx
    ON gateway_rate_limit_allotments (window_start, id);
COMMENT ON INDEX gateway_rate_limit_allotments_window_idx IS
    'Serves prune: returned blocks of windows that ended before a cutoff, in keyset pages.';
DROP INDEX CONCURRENTLY IF EXISTS gateway_rate_limit_allotments_expiry_idx;
