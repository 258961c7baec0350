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

// A CancelTask that a claim beat to the task row is refused with the
// status it found under the row's lock (running), even when the task is
// queued again (its worker died, Recover requeued it) before the refusal
// is built. It used to read the status again after the batch and could
// answer "not queued (status queued)", which the caller cannot act on.
func TestCancelTaskRefusalNamesTheStatusItLockedNotALaterOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceClock(clock.now))
	var (
		once       sync.Once
		recovered  ratelimit.RecoveryResult
		recoverErr error
	)
	afterBatch := func() { // on CancelTask's goroutine, once its first batch is answered
		once.Do(func() { recovered, recoverErr = m.Recover(ctx) })
	}
	l := ratelimit.New(pool, ratelimit.WithClock(clock.now), ratelimit.WithCancelTaskBatchHook(afterBatch))
	task := createAsync(t, l)

	// A worker claims the task in a transaction still open: the cancel's
	// first read sees it queued, its batch waits for the claim's row lock.
	tx := heldTx(t, pool)
	claimed, err := l.WithTx(tx).ClaimTask(ctx, "doomed", time.Second)
	if err != nil || claimed.ID != task.ID {
		t.Fatalf("ClaimTask in the transaction: %+v, %v", claimed, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.CancelTask(ctx, task.ID, "gone")
		done <- err
	}()
	pgtest.AwaitLockWaiters(t, pool, "CancelTask")
	// The claim commits, and its worker dies at once: its lease lapses, and
	// Recover (run by the hook, after the cancel's batch) requeues the task.
	clock.pass(claimed.LeaseExpiresAt)
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit the claim: %v", err)
	}
	err = <-done
	if recoverErr != nil || recovered.RequeuedAsyncTasks != 1 {
		t.Fatalf("Recover after the cancel's batch: %+v, %v; want the task requeued", recovered, recoverErr)
	}
	var nq *ratelimit.TaskNotQueuedError
	if !errors.As(err, &nq) || nq.Status != ratelimit.TaskRunning {
		t.Fatalf("CancelTask beaten by a claim: %v, want a *TaskNotQueuedError with Status running", err)
	}
	// Queued again: its owner may cancel it now.
	if got := getTask(t, l, task.ID); got.Status != ratelimit.TaskQueued {
		t.Fatalf("task after Recover is %s, want queued", got.Status)
	}
	res, err := l.CancelTask(ctx, task.ID, "gone")
	if err != nil || res.Task.Status != ratelimit.TaskCancelled {
		t.Fatalf("CancelTask of the requeued task: %+v, %v", res, err)
	}
	assertDoctorOK(t, pool)
}
