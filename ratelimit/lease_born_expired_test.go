package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Reserve that waited for its concurrency scope longer than its lease's
// TTL (another session held the scope: here a renewal in a transaction of
// its own) gets a lease that counts for its whole TTL from the decision:
// its lease expired at birth (now() is the statement's start, before the
// wait), and a third lease was then admitted on a limit of 2.
func TestReserveThatWaitedPastItsTTLGetsALeaseThatCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	key := uniqueKey("slow")
	first, err := l.Reserve(ctx, "", "", []ratelimit.Limit{concurrent("model", key, 2)})
	if err != nil {
		t.Fatal(err)
	}
	tx := heldTx(t, pool)
	if _, err := l.WithTx(tx).RenewLeases(ctx, first.Leases); err != nil {
		t.Fatal(err)
	}
	short := concurrent("model", key, 2)
	short.LeaseTTL = time.Second
	type result struct {
		g   ratelimit.Grant
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{short})
		done <- result{g, err}
	}()
	pgtest.AwaitLockWaiters(t, pool, "Reserve")
	time.Sleep(1500 * time.Millisecond) // past the second one's TTL
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{concurrent("model", key, 2)}); !errors.Is(err, ratelimit.ErrExceeded) {
		t.Errorf("a third Reserve on a limit of 2 right after the second was granted (its lease expires %v): %v, want ErrExceeded",
			r.g.Leases[0].ExpiresAt, err)
	}
}
