package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/freezer"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// What ConfigurePool's doc, Reserve's and httpadmit's say a cancelled
// statement costs: a caller alone, whose statement is cancelled 100 ms after
// its context ended, gets its answer about 100 ms after that from a server
// that answers the cancel (the statement waits for a row lock: the cancel
// request's round trip, then the 100 ms pause), and 1 s after it from one
// whose host froze (the cancel request is not acknowledged, and the
// connection is given up on after 1 s).
func TestReserveCancelledOnAConfiguredPoolCostsAPauseOrASecond(t *testing.T) {
	t.Parallel()
	// A loaded machine answers late, never early.
	const grace, early, late = 100 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond
	cost := map[string]time.Duration{"waiting for a lock": 100 * time.Millisecond, "server frozen": time.Second}
	for _, stuck := range []string{"waiting for a lock", "server frozen"} {
		t.Run(stuck, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			fr, p := freezer.NewPool(t, pool.Config(), ratelimit.ConfigurePool)
			l := ratelimit.New(p)
			t.Cleanup(l.Close)
			key := uniqueKey("k")
			limits := []ratelimit.Limit{window("key", key, "requests", 100, 1), concurrent("key", key, 10)}
			if err := p.Ping(context.Background()); err != nil { // a connection is open
				t.Fatal(err)
			}
			ctx, leave := context.WithCancel(context.Background())
			errs := make(chan error, 1)
			if stuck == "waiting for a lock" {
				limits, _ = holdCounter(t, pool, key)
				go func() { _, err := l.Reserve(ctx, "", "", limits); errs <- err }()
				pgtest.AwaitLockWaiters(t, pool, "Reserve")
			} else {
				fr.Freeze()
				go func() { _, err := l.Reserve(ctx, "", "", limits); errs <- err }()
				select { // the statement is sent
				case <-fr.SentFrozen():
				case <-time.After(10 * time.Second):
					t.Fatal("Reserve sent nothing to the frozen server in 10 s")
				}
			}
			left := time.Now()
			leave()
			err := <-errs
			took := time.Since(left)
			t.Logf("Reserve returned %v after its caller left", took.Round(time.Millisecond))
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Reserve after its caller left: %v, want context.Canceled", err)
			}
			if want := grace + cost[stuck]; took > want+late || took < want-early {
				t.Errorf("Reserve returned %v after its caller left, want %v (-%v, +%v)", took, want, early, late)
			}
			fr.Close()
		})
	}
}
