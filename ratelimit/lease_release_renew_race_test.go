package ratelimit_test

import (
	"context"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A ReleaseLeases whose statement waited for a renewal of the lease (a
// heartbeat in flight) releases it once the renewal commits. It locked the
// renewed version, which its snapshot (taken before the renewal committed)
// could not see, and its update by tuple id then found nothing: the lease
// stayed live, and the call said it released none.
func TestReleaseLeasesThatWaitedForARenewalReleasesTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{concurrent("model", uniqueKey("renewed"), 10)})
	if err != nil {
		t.Fatal(err)
	}
	tx := heldTx(t, pool)
	if renewed, err := l.WithTx(tx).RenewLeases(ctx, g.Leases); err != nil || len(renewed) != 1 {
		t.Fatalf("RenewLeases in the transaction: %v, %v", renewed, err)
	}
	released := make(chan int, 1)
	go func() {
		n, err := l.ReleaseLeases(ctx, g.Leases, "done")
		if err != nil {
			t.Error(err)
		}
		released <- n
	}()
	pgtest.AwaitLockWaiters(t, pool, "ReleaseLeases")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := <-released; n != 1 {
		t.Errorf("ReleaseLeases after the renewal committed released %d leases, want 1", n)
	}
	if s := summary(t, pool); s.LeasesUnreleased != 0 {
		t.Errorf("%d leases left unreleased, want 0", s.LeasesUnreleased)
	}
	// Released for good: a later renewal finds it lost.
	if _, err := l.RenewLeases(ctx, g.Leases); err == nil {
		t.Errorf("RenewLeases of the released lease succeeded")
	}
}
