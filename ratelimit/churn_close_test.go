package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/leakcheck"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A gateway keeps one Limiter for months while API keys come and go. After
// a churn of distinct keys through every path that keeps state in the
// process (Local limits' blocks and counters, combined Reserve and
// Commit/Release, leases, callers who leave before their answer, whose
// grants are given back in the background), with one-second windows that
// end meanwhile, the Limiter keeps nothing of them: no counter's state, no
// Local admission, nothing queued or in flight. And Close leaves no
// goroutine of pgadmit running.
//
// Not parallel: it counts the process's goroutines. The churn is bounded
// in time (each new key costs a block taken from the database); a burst of
// 200,000 keys is TestAllotBurstOfKeysGivesItsMemoryBack's.
func TestKeyChurnLeavesNothingBehindAndCloseStopsEverything(t *testing.T) {
	before := leakcheck.Snapshot()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	ratelimit.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the check: the pool is the caller's, Close leaves it open
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: 50 * time.Millisecond}))

	const workers, churn, minKeys = 8, 4 * time.Second, 200
	prefix := uniqueKey("churn")
	var next, granted, left atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for stop := time.Now().Add(churn); time.Now().Before(stop) || next.Load() < minKeys; {
				i := next.Add(1)
				if err := churnKey(l, fmt.Sprintf("%s-%d", prefix, i), i); err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("key %d: %v", i, err)
						return
					}
					left.Add(1)
					continue
				}
				granted.Add(1)
			}
		})
	}
	wg.Wait()
	t.Logf("%d keys: %d granted and settled, %d callers left; %+v", next.Load(), granted.Load(), left.Load(), l.Stats())
	if granted.Load() == 0 {
		t.Fatal("no key was granted: nothing was churned")
	}

	awaitAllotmentSets(t, l, 0, 10*time.Second)
	if n := l.LocalAdmissionsKept(); n != 0 {
		t.Errorf("%d Local admissions kept once every counter was dropped", n)
	}
	if q, s, f := l.QueuedReserves(), l.QueuedSettles(), l.ReservesInFlight(); q+s+f != 0 {
		t.Errorf("queued Reserve calls %d, queued settles %d, Reserve places taken %d; want none", q, s, f)
	}
	l.Close()
	leakcheck.AwaitNone(t, before, 3*time.Second)
}

// churnKey admits and settles one request on key's limits: a Local window
// of tokens, a window of requests and a concurrency slot, all of one
// second's windows. Some callers leave before their answer (a deadline of
// a millisecond: context.DeadlineExceeded), some release, the rest commit.
func churnKey(l *ratelimit.Limiter, key string, i int64) error {
	tokens := window("model", key, ratelimit.MetricTokens, 1e9, 10)
	tokens.Local, tokens.Window = true, time.Second
	requests := window("api_key", key, ratelimit.MetricRequests, 1e9, 1)
	requests.Window = time.Second
	limits := []ratelimit.Limit{tokens, requests, concurrent("api_key", key, 10)}
	ctx := context.Background()
	if i%4 == 0 {
		c, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		ctx = c
	}
	g, err := l.Reserve(ctx, "", "", limits)
	if err != nil {
		return err
	}
	if i%3 == 0 {
		_, err = l.Release(context.Background(), g, "churn")
	} else {
		_, err = l.Commit(context.Background(), g, map[string]float64{ratelimit.MetricTokens: 7})
	}
	return err
}
