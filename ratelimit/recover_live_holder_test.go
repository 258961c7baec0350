package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Recover, run every 50 ms as a sweeper would, with a lost-holder grace far
// under the second between a live holder's reports, leaves that holder's
// block alone while a request admitted from it is still in flight after
// its window: the holder reports it every second, and is alive. A grace
// under two seconds is two seconds. Recover used to take the block for
// lost between two reports and return it charging the last one, so that a
// request admitted after that report and then committed was never charged.
func TestRecoverWithAShortGraceLeavesALiveHoldersBlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const windowLen = 2 * time.Second
	pgtest.AwaitRoomInWindow(t, pool, windowLen, 1500*time.Millisecond)
	l := ratelimit.New(pool)
	defer l.Close()
	key := uniqueKey("livegrace")
	lim := localWindow(windowLen, key, 1000, 1)

	var grants []ratelimit.Grant
	for range 3 {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
		if err != nil || !g.Reservations[0].Local {
			t.Fatalf("Reserve: %+v, %v; want a Local admission", g, err)
		}
		grants = append(grants, g)
	}
	blocks := allotments(t, pool, "model", key)
	if len(blocks) != 1 {
		t.Fatalf("%d blocks, want 1", len(blocks))
	}
	end := blocks[0].ExpiresAt

	// The requests are still in flight past the window's end: the holder
	// keeps the block and reports it every second. A sweeper runs Recover
	// over more than two of its reports.
	m := ratelimit.NewMaintenance(pool, ratelimit.WithLostAllotmentGrace(100*time.Millisecond))
	waitPast(t, pool, end.Add(200*time.Millisecond))
	for stop := time.Now().Add(2500 * time.Millisecond); time.Now().Before(stop); time.Sleep(50 * time.Millisecond) {
		res, err := m.Recover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.ReturnedAllotments != 0 {
			t.Fatalf("Recover returned %d block(s) of a live holder, which reports every second: %s", res.ReturnedAllotments, res)
		}
	}
	for _, g := range grants {
		if _, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 2}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != 6 || rows[0].ReservedValue != 0 {
		t.Errorf("counter: %+v; want used 6 (three commits of 2), nothing reserved", rows)
	}
	assertBooksBalance(t, pool, "model", key)
}
