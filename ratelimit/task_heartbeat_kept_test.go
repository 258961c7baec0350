package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// TestTaskHeartbeatKeptWhenRecoverFailsIt checks what Recover leaves in
// gateway_tasks.heartbeat_at ("last heartbeat of the claiming worker"). A
// task it fails (a sync task whose caller died, an async task past its
// requeues) keeps its worker's last heartbeat, as the reference's recovery
// keeps it and as locked_by is kept: with the worker it is the record of
// which process died, and when it was last heard from. A task it requeues
// is unclaimed, its heartbeat cleared, as the reference does.
func TestTaskHeartbeatKeptWhenRecoverFailsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m0 := clocked(pool, &clock, ratelimit.WithMaxRequeues(0))
	m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceClock(clock.now))
	const ttl = time.Second

	heartbeatAt := func(id string) (time.Time, bool) {
		t.Helper()
		hb, err := testq.OpsTaskHeartbeatAt(ctx, pool, mustUUID(t, id))
		if err != nil {
			t.Fatalf("OpsTaskHeartbeatAt: %v", err)
		}
		if hb == nil {
			return time.Time{}, false
		}
		return *hb, true
	}
	beat := func(task ratelimit.Task) time.Time {
		t.Helper()
		clock.advance(10 * time.Millisecond)
		until, err := l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, ttl)
		if err != nil {
			t.Fatalf("HeartbeatTask: %v", err)
		}
		return until
	}

	// Requeued: unclaimed, no heartbeat.
	createAsync(t, l)
	first := claim(t, l, "w-async", ttl)
	clock.pass(beat(first))
	res, err := m.Recover(ctx)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if res.RequeuedAsyncTasks != 1 {
		t.Fatalf("Recover = %+v, want one async task requeued", res)
	}
	if hb, ok := heartbeatAt(first.ID); ok {
		t.Errorf("requeued task: heartbeat_at = %s, want NULL (unclaimed)", hb)
	}

	// Failed: the last heartbeat stays.
	syncDied := startSync(t, l, ttl)
	poison := claim(t, l, "w-async", ttl)
	if poison.ID != first.ID {
		t.Fatalf("claimed %s, want the requeued task %s", poison.ID, first.ID)
	}
	syncUntil, poisonUntil := beat(syncDied), beat(poison)
	clock.pass(latest(syncUntil, poisonUntil))
	res, err = m0.Recover(ctx)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if res.FailedTasks != 1 || res.FailedPoisonTasks != 1 {
		t.Fatalf("Recover = %+v, want one sync and one poison task failed", res)
	}
	for _, tc := range []struct {
		name, id string
		until    time.Time
	}{
		{"sync task failed by Recover", syncDied.ID, syncUntil},
		{"async task failed by Recover past its requeues", poison.ID, poisonUntil},
	} {
		if got := getTask(t, l, tc.id); got.Status != ratelimit.TaskFailed {
			t.Fatalf("%s: status %q, want failed", tc.name, got.Status)
		}
		hb, ok := heartbeatAt(tc.id)
		if want := tc.until.Add(-ttl); !ok || !hb.Equal(want) {
			t.Errorf("%s: heartbeat_at = %s (set %v), want the last heartbeat %s", tc.name, hb, ok, want)
		}
	}
}
