package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Recover whose reclaim left a task behind a lock and is then cut off
// in a later batch (its context cancelled while that batch waits on
// another lock) still reports the task it left: the run's error holds the
// *LockWaitError beside the cancellation, where it used to hold only the
// cancellation.
func TestRecoverCutOffAfterALockWaitStillReportsIt(t *testing.T) {
	t.Parallel()
	// Long enough for the test to see the third batch wait and cancel it
	// before that wait times out, on a loaded machine.
	const bound = 3 * time.Second
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	batchDone := make(chan struct{}, 10)
	l, bounded := clocked(pool, &clock, ratelimit.WithRecoveryBatchSize(1), ratelimit.WithMaintenanceLockTimeout(bound),
		ratelimit.WithProgress(0, func(ratelimit.Progress) { batchDone <- struct{}{} }))
	locked := uniqueKey("locked")

	// 3 async tasks whose workers die, in the order recovery finds them:
	// the first and the third on the counter another transaction holds.
	deadTasksOn(t, l, &clock, claimedAsync(t, l), locked, uniqueKey("free"), locked)
	holdCounters(t, pool, "api_key", locked)

	run, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		res ratelimit.RecoveryResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := bounded.Recover(run)
		done <- outcome{res, err}
	}()
	// The first batch times out (not reported: it rolled back), the second
	// reclaims the free task; then the third waits on the held counter.
	select {
	case <-batchDone:
	case o := <-done:
		t.Fatalf("Recover returned %+v, %v before its second batch", o.res, o.err)
	}
	pgtest.AwaitLockWaiters(t, pool, "the third batch")
	cancel()
	o := <-done

	if !errors.Is(o.err, context.Canceled) {
		t.Errorf("Recover: %v, want its cancellation", o.err)
	}
	assertLockWait(t, o.err, "recover", "reclaim expired tasks", 1, bound)
	if o.res.RequeuedAsyncTasks != 1 {
		t.Errorf("Recover = %+v, want the free task requeued", o.res)
	}
}
