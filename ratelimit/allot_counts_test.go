package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Stats().Local counts every Local limit of a Reserve call once, as admitted
// from a block or decided in the database, and each count agrees with the
// grants: FromBlocks with the reservations marked Local, from 8 goroutines at
// once.
func TestLocalStatsCountWhereEachLocalLimitWasDecided(t *testing.T) {
	t.Parallel()
	l, _, hour := localLimiter(t)
	key := uniqueKey("counts")
	const workers, each = 8, 250
	var fromBlocks atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				g, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{localWindow(hour, key, 1e6, 1)})
				if err != nil {
					t.Error(err)
					return
				}
				if g.Reservations[0].Local {
					fromBlocks.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	s := l.Stats().Local
	if s.FromBlocks != fromBlocks.Load() || s.FromBlocks+s.InDatabase != workers*each || s.FromBlocks == 0 {
		t.Errorf("Stats().Local = %+v after %d Local limits, %d of them admitted from blocks; want FromBlocks that many and InDatabase the rest",
			s, workers*each, fromBlocks.Load())
	}

	// An amount above MaxShare of its limit (a sixteenth by default) is no
	// block's: the database decides it, and it counts there.
	before := l.Stats().Local
	g, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{localWindow(hour, uniqueKey("large"), 160, 11)})
	if err != nil || g.Reservations[0].Local {
		t.Fatalf("Reserve of 11 of 160: %+v, %v; want it decided in the database", g, err)
	}
	if s := l.Stats().Local; s.InDatabase != before.InDatabase+1 || s.FromBlocks != before.FromBlocks {
		t.Errorf("Stats().Local = %+v after a limit too large for a block, was %+v; want InDatabase one more", s, before)
	}

	// A call whose context had ended is decided nowhere.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before = l.Stats().Local
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1e6, 1)}); err == nil {
		t.Fatal("Reserve with an ended context succeeded")
	}
	if s := l.Stats().Local; s.InDatabase != before.InDatabase || s.FromBlocks != before.FromBlocks {
		t.Errorf("Stats().Local = %+v after a call whose context had ended, was %+v; want no count", s, before)
	}
}
