package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A FinishTask whose claim went stale between its two round trips is
// refused with the status its batch found under the task row's lock
// (queued: Recover requeued the task after its lease lapsed), even when
// another worker claims the task again before the refusal is built. It
// used to read the task again after the batch and answer "running, the
// token does not match", a state that came after the refusal.
func TestFinishTaskRefusalNamesTheStatusItLockedNotALaterOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceClock(clock.now))
	other := ratelimit.New(pool, ratelimit.WithClock(clock.now)) // another worker's
	var (
		planOnce, batchOnce sync.Once
		recovered           ratelimit.RecoveryResult
		recoverErr          error
		reclaimed           ratelimit.Task
		reclaimErr          error
	)
	var claimed ratelimit.Task
	afterPlan := func() { // the worker's lease lapses, and Recover requeues its task
		planOnce.Do(func() {
			clock.pass(claimed.LeaseExpiresAt)
			recovered, recoverErr = m.Recover(ctx)
		})
	}
	afterBatch := func() { // another worker claims the task again
		batchOnce.Do(func() { reclaimed, reclaimErr = other.ClaimTask(ctx, "second", time.Minute) })
	}
	l := ratelimit.New(pool, ratelimit.WithClock(clock.now), ratelimit.WithFinishTaskHooks(afterPlan, afterBatch))
	task := createAsync(t, l)
	var err error
	claimed, err = l.ClaimTask(ctx, "first", time.Second)
	if err != nil || claimed.ID != task.ID {
		t.Fatalf("ClaimTask: %+v, %v", claimed, err)
	}

	_, err = l.FinishTask(ctx, task.ID, claimed.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if recoverErr != nil || recovered.RequeuedAsyncTasks != 1 {
		t.Fatalf("Recover between FinishTask's round trips: %+v, %v; want the task requeued", recovered, recoverErr)
	}
	if reclaimErr != nil || reclaimed.ID != task.ID {
		t.Fatalf("the second claim after FinishTask's batch: %+v, %v", reclaimed, reclaimErr)
	}
	var stale *ratelimit.StaleTokenError
	if !errors.As(err, &stale) || stale.Status != ratelimit.TaskQueued {
		t.Fatalf("FinishTask whose task was requeued between its round trips: %v, want a *StaleTokenError with Status queued", err)
	}
	// The second worker's claim stands: it finishes the task.
	if res, err := other.FinishTask(ctx, task.ID, reclaimed.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil || res.Task.Status != ratelimit.TaskSucceeded {
		t.Fatalf("FinishTask of the second claim: %+v, %v", res, err)
	}
	assertDoctorOK(t, pool)
}
