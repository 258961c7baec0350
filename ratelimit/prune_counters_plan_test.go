package ratelimit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// A batch of PruneCounters reads its batch, under a generic plan too, also
// when the batch is small against the counters table. Its delete joined the
// batch to the counters by key, and the generic plan of a batch of 500
// hashed the batch and read the whole table to probe it (about 76 ms on
// 74,000 counters, for each batch of a prune); it now deletes the rows it
// locked by their tuple ids.
func TestPruneCountersReadsOnlyItsSmallBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const rows, batch = 40_000, 500
	if err := testq.FixtureFill(ctx, pool, rows); err != nil {
		t.Fatalf("FixtureFill: %v", err)
	}
	if err := testq.TablesAnalyze(ctx, pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	cutoff, err := queries.PruneCutoff(ctx, pool, db.PruneCutoffParams{OlderThanSeconds: float64(rows / 100 / 2 * 60)})
	if err != nil {
		t.Fatal(err)
	}
	assertBatchReadsItsBatch(t, pool, "PruneCounters", batch, func(tx pgx.Tx) (int64, error) {
		return queries.PruneCounters(ctx, tx, db.PruneCountersParams{Cutoff: cutoff, BatchSize: batch})
	})
}
