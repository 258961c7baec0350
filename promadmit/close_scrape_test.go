package promadmit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Scrapes go on while the Limiter closes under traffic (combined Reserves,
// Local limits whose blocks Close returns, callers who leave before their
// answer, whose grants are given back in the background) and after it has
// closed: every scrape succeeds, no counter of either collector goes down
// (Close resets nothing, so rate reads no reset), and no reading counts
// more give-backs dropped and failed than lost.
func TestScrapesWhileTheLimiterCloses(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := pgtest.WindowWithRoom(t, pool, time.Hour, time.Minute)
	limiter := ratelimit.New(pool)
	reg, metrics := newRegistered(t)
	registerCombining(t, reg, limiter)

	key := fmt.Sprintf("closing-%d", time.Now().UnixNano())
	limits := []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "api_key", Key: key}, Metric: ratelimit.MetricRequests, Limit: 1e9, Amount: 1, Window: hour},
		{Scope: ratelimit.Scope{Type: "api_key", Key: key}, Metric: ratelimit.MetricTokens, Limit: 1e9, Amount: 1, Window: hour, Local: true},
	}
	var traffic sync.WaitGroup
	var stop atomic.Bool
	var reserved atomic.Int64
	for g := range 12 {
		traffic.Go(func() {
			for i := 0; !stop.Load(); i++ {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if (g+i)%5 == 0 { // a caller who leaves: its grant, if any, is given back in the background
					ctx, cancel = context.WithTimeout(ctx, time.Duration(i%3)*time.Millisecond)
				}
				start := time.Now()
				grant, err := limiter.Reserve(ctx, "", "", limits)
				metrics.DatabaseCall(httpadmit.OpReserve, time.Since(start), err)
				cancel()
				if err != nil {
					continue // a caller who left, or a Reserve after Close: the scrapes are what is checked
				}
				reserved.Add(1)
				metrics.Decided([]httpadmit.LimitOutcome{{Limit: httpadmit.Limit{Limit: limits[0]}, Outcome: httpadmit.OutcomeAdmitted, Utilization: 0.9}})
				start = time.Now()
				_, err = limiter.Commit(context.Background(), grant, nil)
				metrics.DatabaseCall(httpadmit.OpCommit, time.Since(start), err)
			}
		})
	}

	closed := make(chan struct{})
	var closing atomic.Bool
	last := map[string]float64{}
	scrapes, afterClose := 0, 0
	deadline := time.Now().Add(60 * time.Second)
	for ; afterClose < 10 && time.Now().Before(deadline) && !t.Failed(); scrapes++ {
		time.Sleep(5 * time.Millisecond) // scrapes spread over the traffic, not all in one instant
		if !closing.Load() && reserved.Load() >= 200 {
			closing.Store(true)
			go func() { // traffic goes on through Close, and past it
				defer close(closed)
				limiter.Close()
			}()
		}
		select {
		case <-closed:
			afterClose++
			if afterClose == 5 {
				stop.Store(true)
			}
		default:
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatalf("scrape %d: %v", scrapes, err)
		}
		now := counterValues(families)
		for _, down := range wentDown(last, now) {
			t.Errorf("scrape %d (closing %v, %d scrapes after Close): %s", scrapes, closing.Load(), afterClose, down)
		}
		if lost := now["pgadmit_lost_total"]; now["pgadmit_give_backs_dropped_total"]+now["pgadmit_give_backs_failed_total"] > lost {
			t.Errorf("scrape %d: give-backs dropped %g and failed %g, above lost %g", scrapes,
				now["pgadmit_give_backs_dropped_total"], now["pgadmit_give_backs_failed_total"], lost)
		}
		last = now
	}
	stop.Store(true)
	traffic.Wait()
	if !closing.Load() || afterClose < 10 {
		t.Fatalf("%d scrapes, %d after Close (closing %v, %d reserved): the test did not scrape through Close", scrapes, afterClose, closing.Load(), reserved.Load())
	}
	<-closed
	limiter.Close() // what the traffic after Close handed to the background
	t.Logf("%d scrapes, %d reserved; %+v", scrapes, reserved.Load(), limiter.Stats())
}
