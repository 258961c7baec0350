-- Prune walks finished reservations in (finalized_at, id) order, a page at a time, resuming after
-- the last row of the previous page (PruneReservations). With an index on finalized_at alone the
-- server had to sort every remaining row of the range for each page; with id in the index the
-- keyset condition is an index condition and the order comes from the index, so each page reads
-- only its own rows.
--
-- Additive: gateway_rate_limit_reservations_finalized_idx (00001) becomes redundant (this index
-- serves everything it served) and may be dropped by a later migration.

-- +goose Up

CREATE INDEX gateway_rate_limit_reservations_finalized_id_idx ON gateway_rate_limit_reservations
    (finalized_at, id) WHERE status <> 'reserved';
COMMENT ON INDEX gateway_rate_limit_reservations_finalized_id_idx IS
    'Serves PruneReservations: keyset pages over finished reservations in (finalized_at, id) order.';

-- +goose Down

DROP INDEX gateway_rate_limit_reservations_finalized_id_idx;
