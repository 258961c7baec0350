package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Stats count the calls waiting in each combiner now, those queued for its
// next statement and those the statement in flight carries
// (CombinerStats.Waiting): behind a row lock, a Reserve statement in flight
// with two Reserves queued behind it is 3, a Commit statement with one
// Commit queued behind it 2; once the lock is gone and every call
// returned, 0.
func TestStatsCountCallsWaitingForCombinedStatements(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	limits := hourLimits(t, pool, window("api_key", uniqueKey("waiting"), "requests", 100, 1))
	grants := make([]ratelimit.Grant, 2)
	for i := range grants {
		g, err := l.Reserve(ctx, "", "", limits)
		if err != nil {
			t.Fatal(err)
		}
		grants[i] = g
	}
	// A transaction holds the counter's row: every statement on it waits.
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := l.WithTx(holder).Reserve(ctx, "", "", limits); err != nil {
		t.Fatal(err)
	}

	errs := make(chan error, 5)
	reserve := func() { _, err := l.Reserve(ctx, "", "", limits); errs <- err }
	commit := func(g ratelimit.Grant) { _, err := l.Commit(ctx, g, nil); errs <- err }
	go reserve()
	pgtest.AwaitLockWaiterCount(t, pool, 1, "the first Reserve statement")
	go reserve()
	go reserve()
	awaitQueuedReserves(t, l, 2, "the next two Reserves")
	go commit(grants[0])
	pgtest.AwaitLockWaiterCount(t, pool, 2, "the first Commit statement")
	go commit(grants[1])
	for deadline := time.Now().Add(5 * time.Second); l.QueuedSettles() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second Commit never queued")
		}
	}
	if s := l.Stats(); s.Reserve.Waiting != 3 || s.Settle.Waiting != 2 {
		t.Errorf("waiting: %d reserves, %d settles; want 3 and 2", s.Reserve.Waiting, s.Settle.Waiting)
	}

	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := <-errs; err != nil {
			t.Errorf("a call behind the lock: %v", err)
		}
	}
	if s := l.Stats(); s.Reserve.Waiting != 0 || s.Settle.Waiting != 0 {
		t.Errorf("once answered: %d reserves, %d settles waiting; want none", s.Reserve.Waiting, s.Settle.Waiting)
	}
}
