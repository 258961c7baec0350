package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A FinishTask whose token goes stale between its two round trips releases
// the reservations its plan read, even one that Recover left open on the
// task it requeued (a Reserve naming only the task, written after Recover
// read the task's reservations): the stale worker releases a reservation of
// the task now running under another worker's claim, which its holder can
// then no longer commit.
func TestStaleFinishLeavesTheNewClaimsReservationsAlone(t *testing.T) {
	t.Parallel()
	_, pool := setup(t)
	ctx := context.Background()
	var clock testClock
	m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceClock(clock.now))
	var hook func()
	l := ratelimit.New(pool, ratelimit.WithClock(clock.now), ratelimit.WithFinishTaskHooks(func() {
		if hook != nil {
			hook()
		}
	}, nil))

	k0, k1 := uniqueKey("r0"), uniqueKey("r1")
	createAsync(t, l)
	a := claim(t, l, "worker-a", 10*time.Second)
	// An open reservation of A's attempt: Recover reads it, then waits for
	// its counter.
	if _, err := l.Reserve(ctx, a.ID, a.AttemptID, []ratelimit.Limit{window("key", k0, "images", 100, 1)}); err != nil {
		t.Fatal(err)
	}
	clock.advance(11 * time.Second) // A's lease lapses
	release := holdCounters(t, pool, "key", k0)
	recovered := make(chan error, 1)
	go func() { _, err := m.Recover(ctx); recovered <- err }()
	pgtest.AwaitLockWaiters(t, pool, "Recover's counter lock")

	// The gateway reserves for the task (still running), naming only it.
	gateway, err := l.Reserve(ctx, a.ID, "", []ratelimit.Limit{window("key", k1, "images", 100, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var b ratelimit.Task
	hook = func() {
		hook = nil
		release() // Recover requeues the task, releasing what it read
		if err := <-recovered; err != nil {
			t.Error(err)
		}
		b = claim(t, l, "worker-b", 60*time.Second)
	}
	_, err = l.FinishTask(ctx, a.ID, a.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if !errors.Is(err, ratelimit.ErrStaleToken) {
		t.Fatalf("FinishTask with A's token: %v, want ErrStaleToken", err)
	}
	if got := getTask(t, l, a.ID); got.Status != ratelimit.TaskRunning || got.ExecutionToken != b.ExecutionToken {
		t.Fatalf("task %s under %s, want running under B's claim", got.Status, got.ExecutionToken)
	}
	// The task runs under B; the gateway's reservation for it is still its own.
	res, err := l.Commit(ctx, gateway, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Reservations[0]; !r.Settled || r.Status != "committed" {
		t.Errorf("Commit of the gateway's reservation for the task B runs: %s, settled %v; want committed (the stale FinishTask released it)", r.Status, r.Settled)
	}
}
