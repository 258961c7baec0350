package pgtest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/pgadmit/pgadmit/internal/dbtest"
)

// LockRequesters counts a session that waits for a lock, as LockWaiters does, and no longer
// once its statement is cancelled; AwaitNoLockWaiters, which reads it, then returns. (What it
// adds, a waiter counted while it runs its deadlock check with no wait event, lasts too short
// a moment to catch here.)
func TestLockRequestersSeeAWaiterUntilItsCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := NewPool(t)
	q := dbtest.New()
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if err := q.OpsLockCounters(ctx, holder); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	pid, err := q.OpsBackendPid(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		tx, err := conn.Begin(waitCtx)
		if err == nil {
			err = q.OpsLockCounters(waitCtx, tx)
			_ = tx.Rollback(ctx)
		}
		waited <- err
	}()
	AwaitLockWaiters(t, pool, "the second lock")
	if got := LockRequesters(t, pool); !slices.Equal(got, []int32{pid}) {
		t.Fatalf("LockRequesters = %v, want the waiter %d", got, pid)
	}
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Errorf("the waiter: %v, want it cancelled", err)
	}
	AwaitNoLockWaiters(t, pool, "the cancelled waiter")
	if got := LockRequesters(t, pool); len(got) != 0 {
		t.Errorf("LockRequesters = %v after the waiter's cancel, want none", got)
	}
}
