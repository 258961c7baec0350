package ratelimit_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A MaxShare above 1 is 1, a block of up to the whole limit: a request of
// half the limit is admitted from a block. It used to take the default
// (1/16), so asking for larger blocks gave smaller ones and this request
// was decided in the database. Zero, a negative share and NaN take the
// default.
func TestLocalMaxShareAboveOneIsOne(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := hourWindow(t, pool)
	ctx := context.Background()
	for _, c := range []struct {
		share float64
		local bool
	}{
		{1, true}, {2, true}, {math.Inf(1), true},
		{0, false}, {-1, false}, {math.NaN(), false},
	} {
		t.Run(fmt.Sprint(c.share), func(t *testing.T) {
			l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{MaxShare: c.share}))
			defer l.Close()
			g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, uniqueKey("maxshare"), 1000, 500)})
			if err != nil {
				t.Fatal(err)
			}
			if got := g.Reservations[0].Local; got != c.local {
				t.Errorf("MaxShare %v: a request of half the limit admitted from a block: %v, want %v", c.share, got, c.local)
			}
			if _, err := l.Commit(ctx, g, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A Local limit whose window is not longer than Margin can never admit
// from a block (a block stops admitting Margin before its window ends): it
// is decided in the database, and takes no block. Its first request used
// to take one all the same, to read the database's clock, which then told
// every later request that the window was ending.
func TestLocalWindowNotLongerThanMarginTakesNoBlock(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := hourWindow(t, pool)
	ctx := context.Background()
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{Margin: hour}))
	defer l.Close()
	key := uniqueKey("margin")
	limit := localWindow(hour, key, 1000, 1) // a window as long as Margin
	for range 5 {
		if err := l.Check(ctx, []ratelimit.Limit{limit}); err != nil {
			t.Fatal(err)
		}
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{limit})
		if err != nil {
			t.Fatal(err)
		}
		if g.Reservations[0].Local {
			t.Fatalf("admitted from a block whose window is not longer than Margin: %+v", g.Reservations[0])
		}
		if _, err := l.Commit(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
	}
	if blocks := allotments(t, pool, "model", key); len(blocks) != 0 {
		t.Errorf("%d blocks taken for a limit no block can serve, want none", len(blocks))
	}
	if n := l.AllotmentSets(); n != 0 {
		t.Errorf("the Limiter keeps blocks of %d counters, want none", n)
	}
	if rows := counterRows(t, pool, "model", key); rows[0].UsedValue != 5 || rows[0].ReservedValue != 0 {
		t.Errorf("counter %+v, want used 5, reserved 0", rows[0])
	}
}
