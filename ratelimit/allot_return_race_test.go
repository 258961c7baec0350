package ratelimit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// A return of a block that waits for a holder's report of the same block
// (AllotmentSync, in a transaction still open: recovery returning the block
// of a holder it took for lost, say) returns it once the report commits,
// on the block's newest version: an update by the tuple id found before the
// wait skipped the block, which then stayed open, its units held, until its
// window ended.
func TestAllotmentReturnWaitingForAReportReturnsTheBlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	key := uniqueKey("returnrace")
	b, err := queries.AllotmentTake(ctx, pool, db.AllotmentTakeParams{
		Holder: "h", ScopeType: "model", ScopeKey: key, Metric: "tokens",
		WindowSeconds: 3600, LimitValue: 1000, Want: 100, Need: 1,
	})
	if err != nil || !b.AllotmentID.Valid {
		t.Fatalf("AllotmentTake: %+v, %v", b, err)
	}
	report, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = report.Rollback(ctx) }()
	if row, err := queries.AllotmentSync(ctx, report, db.AllotmentSyncParams{Ids: []pgtype.UUID{b.AllotmentID}, Consumed: []string{"7"}}); err != nil || row.Synced != 1 {
		t.Fatalf("AllotmentSync: %d, %v", row.Synced, err)
	}
	type result struct {
		rows []db.AllotmentReturnRow
		err  error
	}
	returned := make(chan result, 1)
	go func() {
		rows, err := queries.AllotmentReturn(ctx, pool, db.AllotmentReturnParams{
			Ids: []pgtype.UUID{b.AllotmentID}, Used: []string{"7"}, Reasons: []string{"lost"},
		})
		returned <- result{rows, err}
	}()
	pgtest.AwaitLockWaiters(t, pool, "the return, behind the report")
	if err := report.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-returned
	if r.err != nil || len(r.rows) != 1 || !r.rows[0].Returned || r.rows[0].Granted != 100 {
		t.Fatalf("AllotmentReturn = %+v, %v; want the block returned, 100 granted", r.rows, r.err)
	}
	if open := openBlocks(t, pool, key); len(open) != 0 {
		t.Errorf("%d block(s) still open after the return", len(open))
	}
	assertBooksBalance(t, pool, "model", key)
}
