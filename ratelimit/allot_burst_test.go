package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A burst after a quiet spell grows its blocks from one to the next: the
// rate that sizes a block was measured only over 50 ms or more, so for the
// burst's first 50 ms every block was sized at the rate measured before
// (about 50 units a second here: blocks of some 50 units, each spent at
// once, each taken on the requests' path, a round trip per block: dozens
// where a round trip is a millisecond). What was admitted over a shorter
// span now counts as admitted in 50 ms, a rate the counter has at least:
// a block taken when the last is half spent within 50 ms is at least ten
// times it (and one taken later, measured, is half of it over the time
// since: 1.5 times it unless that took a third of a second).
func TestLocalBurstAfterAQuietSpellGrowsItsBlocks(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := hourWindow(t, pool)
	ctx := context.Background()
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Hour}))
	defer l.Close()
	key := uniqueKey("burst")
	const limit = 1e6
	const blockCap = limit * ratelimit.DefaultAllotmentMaxShare
	var inDatabase atomic.Int64
	admit := func() { // from the burst's goroutines too: no t.Fatal
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, limit, 1)})
		if err != nil {
			t.Error(err)
			return
		}
		if !g.Reservations[0].Local {
			inDatabase.Add(1) // a request that waited for three blocks in vain: exact all the same
		}
		if _, err := l.Commit(ctx, g, nil); err != nil {
			t.Error(err)
		}
	}
	// The quiet spell: a request every 100 ms. The eighth spends half of the
	// first block (16 units) and takes the next ahead, sized at that rate.
	for range 10 {
		admit()
		time.Sleep(100 * time.Millisecond)
	}
	for deadline := time.Now().Add(5 * time.Second); len(allotments(t, pool, "model", key)) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no block taken ahead in the quiet spell")
		}
	}
	quiet := len(allotments(t, pool, "model", key))
	// The burst: 2,000 requests from 2 goroutines, back to back.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 1000 {
				admit()
			}
		})
	}
	wg.Wait()
	l.Close()
	blocks := allotments(t, pool, "model", key)
	// Granted as returned: a block spent and set aside was trimmed to the
	// whole units it admitted.
	for i := quiet + 1; i < len(blocks); i++ {
		last, b := blocks[i-1].Granted, blocks[i].Granted
		if b < 1.5*last && b < blockCap {
			t.Errorf("burst block %d of %g units after one of %g, want it to grow (a round trip per block)", i-quiet+1, b, last)
		}
	}
	for _, b := range blocks {
		t.Logf("block of %g units (%s), admitted %g", b.Granted, b.Reason, b.Used)
	}
	t.Logf("%d blocks in the burst, %d requests decided in the database", len(blocks)-quiet, inDatabase.Load())
	assertBooksBalance(t, pool, "model", key)
}
