package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// localSecond is a Local limit of a one-second window.
func localSecond(key string, limit, amount float64) ratelimit.Limit {
	w := localWindow(key, limit, amount)
	w.Window = time.Second
	return w
}

// A block is taken ahead when the current one is half spent, to be used
// once that one is; one whose window stops admitting before the current
// block is spent, at the rate the process admits, would admit nothing. At
// a request every 40 ms from 500 ms before a window's end, the first block
// (16 units) is half spent 220 ms before it, and its other half would last
// past it: no block may be taken ahead then. Each block of the window must
// admit something.
func TestLocalTakesNoBlockAheadThatItsWindowEndsBeforeUse(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Hour}))
	defer l.Close()
	key := uniqueKey("aheadunused")
	dbNow := pgtest.DBNow(t, pool)
	offset := time.Until(dbNow) // the database's clock less this host's
	end := dbNow.Truncate(time.Second).Add(time.Second)
	if end.Sub(dbNow) < 550*time.Millisecond {
		end = end.Add(time.Second)
	}
	start := end.Add(-500 * time.Millisecond)
	for at := start; at.Before(end.Add(200 * time.Millisecond)); at = at.Add(40 * time.Millisecond) {
		time.Sleep(time.Until(at.Add(-offset)))
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localSecond(key, 1000, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Commit(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	blocks := 0
	for _, b := range allotments(t, pool, "model", key) {
		if !b.WindowStart.Equal(end.Add(-time.Second)) {
			continue
		}
		blocks++
		if b.Used == 0 {
			t.Errorf("block %s of %g units, of the window ending %s, went back having admitted nothing (%s)",
				b.ID, b.Granted, end.Format("15:04:05"), b.Reason)
		}
	}
	if blocks == 0 {
		t.Errorf("no block of the window ending %s", end.Format("15:04:05"))
	}
	assertBooksBalance(t, pool, "model", key)
}
