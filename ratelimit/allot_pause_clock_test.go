package ratelimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// The pause after a failed block request (a second, for an hour's window) is a second on
// this host's clock, whatever the estimate of the database's clock does meanwhile. Put on
// that estimate, a sync that read the database's clock an hour back (an NTP step on its
// host, a failover to one whose clock is behind) stretched it to an hour and a second, in
// which every request of the counter was decided in the database and none asked for a
// block; so did a database clock behind this host's, when the failure came before the
// first reading (the estimate is this host's clock until then).
func TestLocalFailedBlockPauseIsASecondOnThisHostsClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, takes := countingPool(t, "AllotmentTake")
	hour := hourWindow(t, pool)
	step := new(atomic.Int64)
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Hour}),
		ratelimit.WithDBClockStep(func() time.Duration { return time.Duration(step.Load()) }))
	t.Cleanup(l.Close)
	reserveLocal(t, l, hour, uniqueKey("pausesync"), 1e6, 1) // an open block: each sync reads the clock

	if err := testq.OpsAllotmentsRefuseBlocks(ctx, pool); err != nil {
		t.Fatal(err)
	}
	key := uniqueKey("pausefailed")
	before := takes.n.Load()
	failedAt := time.Now()
	if g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1e6, 1)}); err != nil || g.Reservations[0].Local {
		t.Fatalf("Reserve while blocks fail: %+v, %v; want it decided in the database", g, err)
	}
	if n := takes.n.Load() - before; n != 1 {
		t.Fatalf("Reserve while blocks fail asked for %d blocks, want 1", n)
	}
	if err := testq.OpsAllotmentsAllowBlocks(ctx, pool); err != nil {
		t.Fatal(err)
	}

	step.Store(int64(-time.Hour))
	awaitDBClockBefore(t, l, time.Now().Add(-30*time.Minute))
	time.Sleep(time.Until(failedAt.Add(1100 * time.Millisecond)))
	before = takes.n.Load()
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1e6, 1)}); err != nil {
		t.Fatal(err)
	}
	// The block taken admits nothing (its window, on the estimate an hour back, has not begun):
	// that a block was asked for is what the pause decides.
	if takes.n.Load() == before {
		t.Errorf("a request %s after the failed block request, past its pause of a second, asked for no block",
			time.Since(failedAt).Round(time.Millisecond))
	}
}
