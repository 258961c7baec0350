package ratelimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

const (
	gatewayInstances = 4  // separate pools, as separate gateway processes
	goroutines       = 64 // spread over the instances
)

// hammer runs fn on goroutines goroutines spread over the limiters and
// fails the test on any error that is not a refusal.
func hammer(t *testing.T, ls []*ratelimit.Limiter, fn func(l *ratelimit.Limiter, worker int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for worker := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ls[worker%len(ls)], worker); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("worker error: %v", err)
	}
}

// refusedOrNil passes refusals through as nil and keeps every other error.
func refusedOrNil(err error) (admitted bool, _ error) {
	if err == nil {
		return true, nil
	}
	if errors.Is(err, ratelimit.ErrExceeded) {
		return false, nil
	}
	return false, err
}

// reserveTimes reserves limit n times, counting admissions and refusals.
func reserveTimes(l *ratelimit.Limiter, n int, limit ratelimit.Limit, admitted, refused *atomic.Int64) error {
	for range n {
		_, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{limit})
		ok, err := refusedOrNil(err)
		if err != nil {
			return err
		}
		if ok {
			admitted.Add(1)
		} else {
			refused.Add(1)
		}
	}
	return nil
}

func TestConcurrentWindowAdmitsExactlyTheLimit(t *testing.T) {
	t.Parallel()
	pools := pgtest.NewPools(t, gatewayInstances)
	ls := limitersOn(pools)
	key := uniqueKey("key")
	limit := window("api_key", key, "requests", 100, 1)
	limit.Window = ratelimit.MaxWindow
	var admitted, refused atomic.Int64
	hammer(t, ls, func(l *ratelimit.Limiter, _ int) error {
		return reserveTimes(l, 4, limit, &admitted, &refused) // 256 attempts for 100 units
	})
	rows := counterRows(t, pools[0], "api_key", key)
	t.Logf("window limit 100: admitted %d, refused %d, counters %+v", admitted.Load(), refused.Load(), rows)
	if admitted.Load() != 100 || refused.Load() != 156 || len(rows) != 1 || rows[0].UsedValue+rows[0].ReservedValue != 100 {
		t.Fatalf("admitted %d, counters %+v; want 100 and used+reserved exactly 100", admitted.Load(), rows)
	}
	assertBooksBalance(t, pools[0], "api_key", key)
}

func TestConcurrentLeasesAdmitExactlyTheLimit(t *testing.T) {
	t.Parallel()
	pools := pgtest.NewPools(t, gatewayInstances)
	model := uniqueKey("model")
	limit := concurrent("model", model, 10)
	limit.LeaseTTL = time.Hour
	var admitted, refused atomic.Int64
	hammer(t, limitersOn(pools), func(l *ratelimit.Limiter, _ int) error {
		return reserveTimes(l, 2, limit, &admitted, &refused) // 128 attempts for 10 slots
	})
	live := liveLeases(t, pools[0], "model", model)
	t.Logf("concurrent limit 10: admitted %d, refused %d, live leases %d", admitted.Load(), refused.Load(), live)
	if admitted.Load() != 10 || refused.Load() != 118 || live != 10 {
		t.Fatalf("admitted %d, refused %d, live %d; want exactly 10, 118, 10", admitted.Load(), refused.Load(), live)
	}
}

// limitersOn returns one Limiter per pool: one per gateway instance.
func limitersOn(pools []*pgxpool.Pool) []*ratelimit.Limiter {
	out := make([]*ratelimit.Limiter, len(pools))
	for i, p := range pools {
		out[i] = ratelimit.New(p)
	}
	return out
}

// Across window rollovers every window admits exactly its limit: 64
// goroutines hammer a 1 s window of 100 until they admitted in four windows.
func TestConcurrentWindowRollover(t *testing.T) {
	t.Parallel()
	pools := pgtest.NewPools(t, gatewayInstances)
	key, model := uniqueKey("key"), uniqueKey("model")
	perSecond := window("api_key", key, "requests", 100, 1)
	perSecond.Window = time.Second
	slots := concurrent("model", model, 10)
	slots.LeaseTTL = time.Hour

	var mu sync.Mutex
	perWindow := map[time.Time]int{}
	var leasesHeld atomic.Int64
	// The workers run until they admitted in four windows (two of them covered whole), not for
	// a fixed 3.5 s: under load that could see fewer than three windows. At most 30 s.
	deadline := time.Now().Add(30 * time.Second)
	enough := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(perWindow) >= 4 || time.Now().After(deadline)
	}
	hammer(t, limitersOn(pools), func(l *ratelimit.Limiter, worker int) error {
		for !enough() {
			limits := []ratelimit.Limit{perSecond}
			if worker%4 == 0 {
				limits = append(limits, slots) // a quarter also takes a slot and never gives it back
			}
			grant, err := l.Reserve(context.Background(), "", "", limits)
			if ok, err := refusedOrNil(err); err != nil {
				return err
			} else if !ok {
				continue
			}
			mu.Lock()
			perWindow[grant.Reservations[0].WindowStart]++
			mu.Unlock()
			leasesHeld.Add(int64(len(grant.Leases)))
		}
		return nil
	})

	rows := counterRows(t, pools[0], "api_key", key)
	if len(rows) < 3 {
		t.Fatalf("only %d windows seen in 30 s of 1 s windows", len(rows))
	}
	// rows are newest first; the first and last windows were only partly covered.
	for i, row := range rows {
		got := perWindow[row.WindowStart]
		if float64(got) != row.ReservedValue || got > 100 {
			t.Errorf("window %s: %d admitted, counter reserved %v; want equal and at most 100", row.WindowStart, got, row.ReservedValue)
		}
		if i > 0 && i < len(rows)-1 && got != 100 {
			t.Errorf("window %s was fully covered but admitted %d, want exactly 100", row.WindowStart, got)
		}
	}
	live := liveLeases(t, pools[0], "model", model)
	t.Logf("rollover: %d windows, admitted per window %v, leases held %d, live %d", len(rows), perWindow, leasesHeld.Load(), live)
	if leasesHeld.Load() != 10 || live != 10 {
		t.Errorf("leases held %d, live %d; want exactly 10 across the rollovers", leasesHeld.Load(), live)
	}
	assertBooksBalance(t, pools[0], "api_key", key)
}

// Mixed three-limit admissions, listed in random orders over overlapping
// scopes, settled at random: no deadlock, and the books add up exactly.
func TestConcurrentMixedOrdersNeverDeadlock(t *testing.T) {
	t.Parallel()
	pools := pgtest.NewPools(t, gatewayInstances)
	keys := []string{uniqueKey("key"), uniqueKey("key")}
	models := []string{uniqueKey("model"), uniqueKey("model")}

	var mu sync.Mutex
	committed := map[string]float64{} // "key metric" -> committed actual
	var admitted, refused atomic.Int64
	hammer(t, limitersOn(pools), func(l *ratelimit.Limiter, worker int) error {
		rng := rand.New(rand.NewPCG(uint64(worker), 42))
		ctx := context.Background()
		for range 25 {
			key, model := keys[rng.IntN(len(keys))], models[rng.IntN(len(models))]
			limits := []ratelimit.Limit{
				window("api_key", key, "requests", 1e6, 1),
				window("api_key", key, "tokens", 1e9, 500),
				concurrent("model", model, 6),
			}
			rng.Shuffle(len(limits), func(i, j int) { limits[i], limits[j] = limits[j], limits[i] })
			grant, err := l.Reserve(ctx, "", "", limits)
			if ok, err := refusedOrNil(err); err != nil {
				return err
			} else if !ok {
				refused.Add(1)
				continue
			}
			admitted.Add(1)
			if rng.IntN(3) == 0 {
				if _, err := l.Release(ctx, grant, "client_cancelled"); err != nil {
					return err
				}
				continue
			}
			tokens := float64(rng.IntN(900))
			if _, err := l.Commit(ctx, grant, map[string]float64{"tokens": tokens}); err != nil {
				return err
			}
			mu.Lock()
			committed[key+" requests"]++
			committed[key+" tokens"] += tokens
			mu.Unlock()
		}
		return nil
	})
	t.Logf("mixed: admitted %d, refused %d", admitted.Load(), refused.Load())
	if admitted.Load() == 0 || refused.Load() == 0 {
		t.Errorf("admitted %d, refused %d: the test should see both", admitted.Load(), refused.Load())
	}
	assertSettled(t, pools[0], keys, models, committed)
}
