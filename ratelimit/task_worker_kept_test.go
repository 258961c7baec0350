package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// TestTaskWorkerKeptAfterItFinishes checks Task.Worker's documented promise,
// "who claimed or started the task (kept after it finishes)", on every way
// a task finishes: by FinishTask, and by Recover failing a sync task whose
// caller died or an async task past its requeues. The attempts record no
// worker, so a task recovery failed without it would not say which process
// died. A task recovery requeues is not finished: it has no worker until
// the next claim.
func TestTaskWorkerKeptAfterItFinishes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithMaxRequeues(0))

	finished := startSync(t, l, time.Hour)
	if _, err := l.FinishTask(ctx, finished.ID, finished.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	syncDied := startSync(t, l, time.Second)
	createAsync(t, l)
	poison := claim(t, l, "poison-worker", time.Second)

	clock.pass(latest(syncDied.LeaseExpiresAt, poison.LeaseExpiresAt))
	res, err := m.Recover(ctx)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if res.FailedTasks != 1 || res.FailedPoisonTasks != 1 {
		t.Fatalf("Recover = %+v, want one sync and one poison task failed", res)
	}

	for _, tc := range []struct {
		name, id, status, worker string
	}{
		{"finished by FinishTask", finished.ID, ratelimit.TaskSucceeded, "w-sync"},
		{"sync task failed by Recover", syncDied.ID, ratelimit.TaskFailed, "w-sync"},
		{"async task failed by Recover past its requeues", poison.ID, ratelimit.TaskFailed, "poison-worker"},
	} {
		got := getTask(t, l, tc.id)
		if got.Status != tc.status || !got.Finished() {
			t.Fatalf("%s: status %q, want %q", tc.name, got.Status, tc.status)
		}
		if got.Worker != tc.worker {
			t.Errorf("%s: Worker = %q, want %q (kept after it finishes)", tc.name, got.Worker, tc.worker)
		}
		if got.ExecutionToken != "" || !got.LeaseExpiresAt.IsZero() || got.AttemptID != "" {
			t.Errorf("%s: execution fields set after it finished: %+v", tc.name, got)
		}
	}
}
