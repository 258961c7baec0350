package ratelimit_test

import (
	"context"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The doctor balances a counter against its blocks: an open block's
// granted units are part of what the counter must hold reserved, a
// returned block's charge part of what it must hold used. Tests under
// traffic show it finds nothing wrong with blocks; here a counter with a
// block is damaged, and the doctor names the damage against exactly what
// the block accounts for.
func TestDoctorBalancesCountersAgainstTheirBlocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	key := uniqueKey("doc")
	l, g, block := oneOpenBlock(t, pool, key)
	r := g.Reservations[0]
	doctorSays := func(kind ratelimit.ProblemKind, expected, actual float64) {
		t.Helper()
		report, err := ratelimit.NewMaintenance(pool).Doctor(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(report.Problems) != 1 {
			t.Fatalf("Doctor: %s; want one %s", report, kind)
		}
		if p := report.Problems[0]; p.Kind != kind || p.ScopeKey != key || p.Expected != expected || p.Actual != actual {
			t.Errorf("problem %+v, want %s expecting %g, finding %g", p, kind, expected, actual)
		}
	}
	corruptCounter(t, pool, r, 5, 0)
	doctorSays(ratelimit.ProblemCounterReserved, block.Granted, block.Granted+5)
	corruptCounter(t, pool, r, -5, 0)

	if _, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 7}); err != nil {
		t.Fatal(err)
	}
	l.Close() // the block goes back, charging the 7 committed
	assertDoctorOK(t, pool)
	corruptCounter(t, pool, r, 0, -1)
	doctorSays(ratelimit.ProblemCounterUsed, 7, 6)
}
