package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Prune deletes the blocks of Local limits once their window ended before
// the cutoff, with their counter: those returned by their holder and a
// lost holder's, once Recover returned it. A block of a month's window
// still running stays, returned or not, and so does its counter.
func TestPruneDeletesBlocksOfEndedWindowsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	// One length for the lost block and the hour's: both windows end
	// before lostPast.
	hour := hourWindow(t, pool)
	lostKey := uniqueKey("lost")
	_, lostPast := lostBlock(t, pool, hour, lostKey)
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Hour}))
	hourly, month := uniqueKey("hour"), uniqueKey("month")
	for _, lim := range []ratelimit.Limit{localWindow(hour, hourly, 1000, 1), monthLocal(month)} {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
		if err != nil || !g.Reservations[0].Local {
			t.Fatalf("Reserve %s: %+v, %v; want a Local admission", lim.Scope.Key, g, err)
		}
		if _, err := l.Commit(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
		if lim.Scope.Key == month && g.Reservations[0].ResetAt.Before(lostPast.Add(time.Minute)) {
			t.Skip("the 30-day window ends within the test's jump of the clock (once in 720 runs)")
		}
	}
	l.Close() // returns both blocks

	var clock testClock
	clock.pass(lostPast)
	m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceClock(clock.now))
	if rec, err := m.Recover(ctx); err != nil || rec.ReturnedAllotments != 1 {
		t.Fatalf("Recover = %+v, %v; want the lost block returned", rec, err)
	}
	res, err := m.Prune(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allotments != 2 || res.Counters != 2 {
		t.Errorf("Prune = %+v; want the hour's and the lost block and their 2 counters", res)
	}
	for _, key := range []string{hourly, lostKey} {
		if n := len(allotments(t, pool, "model", key)); n != 0 {
			t.Errorf("%s: %d blocks left after prune, want 0", key, n)
		}
	}
	if n := len(allotments(t, pool, "model", month)); n != 1 {
		t.Errorf("month: %d blocks left after prune, want its 1 (its window still runs)", n)
	}
	assertBooksBalance(t, pool, "model", month)
}

// monthLocal is a Local window limit of 30 days.
func monthLocal(key string) ratelimit.Limit {
	return localWindow(30*24*time.Hour, key, 1e9, 1)
}
