package ratelimit_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
)

// The statements of a holder's blocks probe those blocks by key, even when
// the last VACUUM ran while no block was open and recorded the partial
// index of open blocks as empty: reading that index instead reads the open
// blocks of every holder (AllotmentTake does it holding the counter row).
// Measured on one session, with 300 holders each holding a block: the
// holder's report of what it admitted (AllotmentSync), the trim of its
// block as it takes the next (AllotmentTake), and its return
// (AllotmentReturn).
func TestAllotmentStatementsProbeTheirBlocksAfterAQuietVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := oneSessionPool(t) // the plans built after the vacuum are the ones measured

	take := func(q db.DBTX, holder string, trim pgtype.UUID) pgtype.UUID {
		t.Helper()
		p := db.AllotmentTakeParams{
			Holder: holder, ScopeType: "api_key", ScopeKey: "shared", Metric: "tokens",
			WindowSeconds: 3600, LimitValue: 1e9, Want: 10, Need: 1, TrimID: trim,
		}
		if trim.Valid {
			p.TrimTo = pgtype.Text{String: "0", Valid: true} // admitted nothing: trimmed to 0
		}
		b, err := queries.AllotmentTake(ctx, q, p)
		if err != nil || !b.AllotmentID.Valid {
			t.Fatalf("AllotmentTake(%s): %+v, %v", holder, b, err)
		}
		return b.AllotmentID
	}
	giveBack := func(q db.DBTX, id pgtype.UUID) {
		t.Helper()
		rows, err := queries.AllotmentReturn(ctx, q, db.AllotmentReturnParams{
			Ids: []pgtype.UUID{id}, Used: []string{"1"}, Reasons: []string{"test"},
		})
		if err != nil || len(rows) != 1 || !rows[0].Returned {
			t.Fatalf("AllotmentReturn: %+v, %v", rows, err)
		}
	}
	// A quiet moment: blocks taken and returned, none open, then a vacuum.
	for i := range 8 {
		giveBack(pool, take(pool, fmt.Sprintf("quiet-%d", i), pgtype.UUID{}))
	}
	if err := testq.LedgersVacuumAnalyze(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// Then a fleet of holders, each with a block open.
	const holders = 300
	var mine pgtype.UUID
	for i := range holders {
		mine = take(pool, fmt.Sprintf("holder-%d", i), pgtype.UUID{})
	}

	// reads fails the test when op read more than a few index entries of
	// any table (a probe of a key may read a few: the dead versions of a
	// counter that every take updates).
	reads := func(what string, op func(tx pgx.Tx)) {
		t.Helper()
		for table, read := range indexReads(t, pool, op) {
			if read > 20 {
				t.Errorf("%s read %d index entries of %s with %d blocks open, want a few", what, read, table, holders)
			}
		}
	}
	reads("AllotmentSync of one block", func(tx pgx.Tx) {
		row, err := queries.AllotmentSync(ctx, tx, db.AllotmentSyncParams{Ids: []pgtype.UUID{mine}, Consumed: []string{"3"}})
		if err != nil || row.Synced != 1 {
			t.Fatalf("AllotmentSync: %d rows, %v; want 1", row.Synced, err)
		}
	})
	for round := range 6 { // past the custom plans of a session's first five calls
		reads(fmt.Sprint("AllotmentTake trimming the holder's block, round ", round+1), func(tx pgx.Tx) {
			take(tx, fmt.Sprintf("holder-%d", holders-1), mine)
		})
	}
	for round := range 6 {
		reads(fmt.Sprint("AllotmentReturn of one block, round ", round+1), func(tx pgx.Tx) { giveBack(tx, mine) })
	}
}
