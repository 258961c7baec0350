package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A task row its worker holds is passed over, and so must not stop the
// reclaim of the expired tasks after it: with a batch of as many held tasks
// as the batch size (here one, the oldest expiry, which every find returns
// first), the step used to read "a full batch of which nothing changed" and
// end, leaving every other expired task, and the capacity it holds, until
// the worker's transaction ended.
func TestRecoverReclaimsPastAFullBatchOfHeldTaskRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithRecoveryBatchSize(1))
	hot := window("model", uniqueKey("hot"), ratelimit.MetricRequests, 1000, 1)

	held := startSync(t, l, time.Second)   // expires first: every find returns it first
	dead := startSync(t, l, 2*time.Second) // its worker died
	if _, err := l.Reserve(ctx, dead.ID, dead.AttemptID, []ratelimit.Limit{hot}); err != nil {
		t.Fatalf("Reserve(dead task): %v", err)
	}
	clock.pass(dead.LeaseExpiresAt)

	tx := heartbeatHeld(t, l, pool, held) // its worker heartbeats it in its own transaction, and keeps it open

	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got, err := m.Recover(rctx)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	want := ratelimit.RecoveryResult{FailedTasks: 1, FailedAttempts: 1, ReleasedRateReservations: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Recover while the oldest expired task's row was held (-want +got):\n%s", diff)
	}
	if task := getTask(t, l, dead.ID); task.Status != ratelimit.TaskFailed {
		t.Fatalf("dead task after Recover: %s, want failed", task.Status)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit the worker's transaction: %v", err)
	}
	assertDoctorOK(t, pool)
}
