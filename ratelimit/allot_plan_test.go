package ratelimit_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// A holder's report of what it admitted from its open blocks probes those
// blocks by key, even when the last VACUUM ran while no block was open and
// recorded the partial index of open blocks as empty: reading that index
// instead reads the open blocks of every holder.
func TestAllotmentSyncProbesItsBlocksAfterAQuietVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // one session: the plans built after the vacuum are the ones measured
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	take := func(holder string) pgtype.UUID {
		t.Helper()
		b, err := queries.AllotmentTake(ctx, pool, db.AllotmentTakeParams{
			Holder: holder, ScopeType: "api_key", ScopeKey: "shared", Metric: "tokens",
			WindowSeconds: 3600, LimitValue: 1e9, Want: 10, Need: 1,
		})
		if err != nil || !b.AllotmentID.Valid {
			t.Fatalf("AllotmentTake(%s): %+v, %v", holder, b, err)
		}
		return b.AllotmentID
	}
	// A quiet moment: blocks taken and returned, none open, then a vacuum.
	for i := range 8 {
		id := take(fmt.Sprintf("quiet-%d", i))
		if _, err := queries.AllotmentReturn(ctx, pool, db.AllotmentReturnParams{
			Ids: []pgtype.UUID{id}, Used: []float64{1}, Reasons: []string{"test"},
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := testq.LedgersVacuumAnalyze(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// Then a fleet of holders, each with a block open.
	const holders = 300
	var mine pgtype.UUID
	for i := range holders {
		mine = take(fmt.Sprintf("holder-%d", i))
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	before, err := testq.TableScansInTransaction(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	n, err := queries.AllotmentSync(ctx, tx, db.AllotmentSyncParams{Ids: []pgtype.UUID{mine}, Consumed: []float64{3}})
	if err != nil || n != 1 {
		t.Fatalf("AllotmentSync: %d rows, %v; want 1", n, err)
	}
	after, err := testq.TableScansInTransaction(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range after {
		if read := a.IndexEntriesRead - before[i].IndexEntriesRead; read > 5 {
			t.Errorf("AllotmentSync of one block read %d index entries of %s with %d blocks open, want 1", read, a.TableName, holders)
		}
	}
}
