package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// lostBlockReporting has holder "h" take a block of 100 units of a window
// that ended two hours ago or more (its window and its last report older
// than the grace, an hour at most: Recover finds it lost), and then report
// 25 admitted from it in a transaction it returns open, which holds the
// block's row until the test commits it: the report lands while Recover
// waits for the row.
func lostBlockReporting(t *testing.T, pool *pgxpool.Pool, key string) (pgtype.UUID, pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	past := time.Now().Add(-3 * time.Hour)
	b, err := queries.AllotmentTake(ctx, pool, db.AllotmentTakeParams{
		Holder: "h", ScopeType: "model", ScopeKey: key, Metric: "tokens",
		WindowSeconds: 3600, LimitValue: 1000, Want: 100, Need: 1, Now: &past,
	})
	if err != nil || !b.AllotmentID.Valid || b.Granted != "100" {
		t.Fatalf("AllotmentTake: %+v, %v", b, err)
	}
	report, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = report.Rollback(ctx) })
	if row, err := queries.AllotmentSync(ctx, report, db.AllotmentSyncParams{Ids: []pgtype.UUID{b.AllotmentID}, Consumed: []string{"25"}}); err != nil || row.Synced != 1 {
		t.Fatalf("AllotmentSync: %d, %v", row.Synced, err)
	}
	return b.AllotmentID, report
}

// recoverBehind runs m.Recover until it waits for a lock (the block's row,
// which the report holds), commits the report, and returns how many blocks
// Recover returned.
func recoverBehind(t *testing.T, pool *pgxpool.Pool, m *ratelimit.Maintenance, report pgx.Tx) int64 {
	t.Helper()
	ctx := context.Background()
	type result struct {
		rec ratelimit.RecoveryResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		rec, err := m.Recover(ctx)
		done <- result{rec, err}
	}()
	pgtest.AwaitLockWaiters(t, pool, "Recover's return, behind the report")
	if err := report.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("Recover: %v", r.err)
	}
	return r.rec.ReturnedAllotments
}

// A report of a lost block that commits while Recover's return waits for
// the block (its statement began before the cutoff, so the block is still
// lost: here Recover's clock is a minute ahead) is what Recover charges:
// the return charged the consumed Recover read before the wait (0), and the
// block's used and the counter's used_value under-recorded the window.
func TestRecoverChargesAReportThatCommitsWhileItWaits(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	key := uniqueKey("lostreport")
	id, report := lostBlockReporting(t, pool, key)
	var clock testClock
	clock.advance(time.Minute)
	m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceClock(clock.now))

	if n := recoverBehind(t, pool, m, report); n != 1 {
		t.Fatalf("Recover returned %d block(s), want the lost one", n)
	}
	blocks := allotments(t, pool, "model", key)
	if len(blocks) != 1 || blocks[0].ID != id || blocks[0].ReturnedAt == nil || blocks[0].Used != 25 {
		t.Fatalf("blocks %+v after Recover, want the block returned with used 25 (its last report)", blocks)
	}
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != 25 || rows[0].ReservedValue != 0 {
		t.Errorf("counter %+v after Recover, want used 25, reserved 0", rows)
	}
	assertBooksBalance(t, pool, "model", key)
}

// A block whose holder reports after the cutoff, while Recover's return
// waits for it, is not lost: Recover leaves it open (it returned it, on the
// consumed it read before the wait), and the holder returns it itself with
// the exact count of what it admitted, which may be less than the report,
// whose consumed counts requests still in flight at their estimate.
func TestRecoverLeavesABlockWhoseHolderReportsWhileItWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	key := uniqueKey("lostalive")
	id, report := lostBlockReporting(t, pool, key)
	// The database's clock: the report is fresh (a grace of an hour, so
	// that a slow run does not make it stale).
	m := ratelimit.NewMaintenance(pool, ratelimit.WithLostAllotmentGrace(time.Hour))

	if n := recoverBehind(t, pool, m, report); n != 0 {
		t.Errorf("Recover returned %d block(s), want none: its holder reported", n)
	}
	if open := openBlocks(t, pool, key); len(open) != 1 || open[0].Consumed != 25 {
		t.Fatalf("open blocks %+v after Recover, want the block, consumed 25", open)
	}
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != 0 || rows[0].ReservedValue != 100 {
		t.Errorf("counter %+v after Recover, want used 0, reserved 100 (the open block)", rows)
	}

	rows, err := queries.AllotmentReturn(ctx, pool, db.AllotmentReturnParams{
		Ids: []pgtype.UUID{id}, Used: []string{"20"}, Reasons: []string{"closed"},
	})
	if err != nil || len(rows) != 1 || !rows[0].Returned || rows[0].Used != 20 {
		t.Fatalf("the holder's AllotmentReturn = %+v, %v; want the block returned, used 20", rows, err)
	}
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != 20 || rows[0].ReservedValue != 0 {
		t.Errorf("counter %+v after the holder's return, want used 20, reserved 0", rows)
	}
	assertBooksBalance(t, pool, "model", key)
}
