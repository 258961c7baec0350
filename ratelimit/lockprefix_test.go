package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// With an advisory-lock prefix the queue-scope locks take keys with the
// prefix in their upper 32 bits, and queue limits stay exact when every
// instance uses it: 64 callers over 4 pools race for 10 places. So for a
// positive prefix, a negative one (whose sign must not leak into the hash
// below it, nor the hash's into it), and the extremes of an int32.
func TestAdvisoryLockPrefixKeepsQueueLimitsExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, gatewayInstances)
	const limit = 10

	// The keys held while a creation's transaction is open, as another
	// session sees them in pg_locks.
	held := func(t *testing.T, opts ...ratelimit.Option) []int64 {
		t.Helper()
		tx, err := pools[0].Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := ratelimit.New(tx, opts...).CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{queueLimit("s", 5), queueLimit("t", 5)}}); err != nil {
			t.Fatalf("CreateTask: %v", err)
		}
		locks, err := testq.AdvisoryLocksHeld(ctx, pools[1])
		if err != nil {
			t.Fatalf("AdvisoryLocksHeld: %v", err)
		}
		keys := make([]int64, len(locks))
		for i, l := range locks {
			if l.OutsideTransaction {
				t.Errorf("lock %x held outside a transaction", l.LockKey)
			}
			keys[i] = l.LockKey
		}
		return keys
	}

	prefixes := []int32{0x5ca1ab1e, -0x5ca1ab1e, -1, math.MinInt32, math.MaxInt32}
	for _, prefix := range prefixes {
		t.Run(fmt.Sprintf("%d", prefix), func(t *testing.T) {
			// Queues of their own: the tasks admitted stay queued.
			q, r := fmt.Sprintf("q%d", prefix), fmt.Sprintf("r%d", prefix)
			var admitted, refused atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range goroutines {
				wg.Go(func() {
					l := ratelimit.New(pools[i%len(pools)], ratelimit.WithAdvisoryLockPrefix(prefix))
					<-start
					_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{queueLimit(q, limit), queueLimit(r, 1000)}})
					switch {
					case err == nil:
						admitted.Add(1)
					case errors.Is(err, ratelimit.ErrExceeded):
						refused.Add(1)
					default:
						t.Errorf("CreateTask: %v", err)
					}
				})
			}
			close(start)
			wg.Wait()
			if admitted.Load() != limit || refused.Load() != goroutines-limit {
				t.Fatalf("admitted %d, refused %d; want %d and %d", admitted.Load(), refused.Load(), limit, goroutines-limit)
			}

			withPrefix := held(t, ratelimit.WithAdvisoryLockPrefix(prefix))
			if len(withPrefix) != 2 {
				t.Fatalf("keys held with a prefix: %x, want one per queue scope", withPrefix)
			}
			for _, k := range withPrefix {
				if int32(k>>32) != prefix {
					t.Errorf("key %x does not carry the prefix %x", k, prefix)
				}
			}
		})
	}

	without := held(t)
	if len(without) != 2 {
		t.Fatalf("keys held without a prefix: %x, want one per queue scope", without)
	}
	for _, k := range without {
		for _, prefix := range prefixes {
			if int32(k>>32) == prefix {
				t.Errorf("key %x carries the prefix %x though none was set", k, prefix)
			}
		}
	}
}
