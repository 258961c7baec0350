package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A RenewLeases whose statement waited for an Attach of the lease (which
// takes no scope lock, so nothing orders it before the renewal's snapshot)
// renews the lease once the Attach commits. The lease is live throughout:
// the renewal must not report it lost.
func TestRenewLeasesThatWaitedForAnAttachRenewsTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	task := startSync(t, l, time.Minute)
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{concurrent("model", uniqueKey("attached"), 10)})
	if err != nil {
		t.Fatal(err)
	}
	tx := heldTx(t, pool)
	if _, err := l.WithTx(tx).Attach(ctx, task.AttemptID, g); err != nil {
		t.Fatalf("Attach in the transaction: %v", err)
	}
	type result struct {
		renewed []ratelimit.Lease
		err     error
	}
	done := make(chan result, 1)
	go func() {
		renewed, err := l.RenewLeases(ctx, g.Leases)
		done <- result{renewed, err}
	}()
	pgtest.AwaitLockWaiters(t, pool, "RenewLeases")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || len(r.renewed) != 1 {
		t.Errorf("RenewLeases of a live lease after an Attach committed: %v, %v; want it renewed", r.renewed, r.err)
	}
}
