package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The race that made a HeartbeatTask that locked the task row in a locking
// read and then updated it in the same statement deadlock with FinishTask,
// played in order. An admission for the task holds the row FOR KEY SHARE
// (its inserts' foreign keys), and an AppendEvent updates the row beside it,
// so the version the heartbeat's snapshot sees ends with a MultiXact: a
// committed update and a live key share. The heartbeat waits for the
// AppendEvent holding that version's tuple lock, and FinishTask
// (TaskFinishLock) queues for the tuple lock. Once the AppendEvent commits,
// the locking read locked the newest version, but the UPDATE, which
// reaches the row only from the version its snapshot sees, asked for that
// version's tuple lock again, now held by FinishTask; FinishTask waited
// for the admission, then for the heartbeat's lock on the newest version:
// SQLSTATE 40P01. Neither call may fail: the heartbeat renews the lease
// (or, had FinishTask gone first, is refused with ErrStaleToken), and
// FinishTask finishes the task once the admission commits.
func TestHeartbeatWaitingBesideFinishTaskForAnUpdatedRowDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Calls on one pool, the transactions they wait for and the look at
	// pg_locks on another: a pool of four connections would be full.
	pools := pgtest.NewPools(t, 2)
	l, pool := ratelimit.New(pools[0]), pools[1]
	key := uniqueKey("beat")
	limits := []ratelimit.Limit{window("key", key, "tokens", 1e12, 10)}
	limits[0].Window = pgtest.WindowWithRoom(t, pool, time.Hour, 5*time.Minute)
	task := startSync(t, l, time.Minute)

	admission := heldTx(t, pool)
	if _, err := l.WithTx(admission).Reserve(ctx, task.ID, task.AttemptID, limits); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	update := heldTx(t, pool)
	if _, err := l.WithTx(update).AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "task.progress"}); err != nil {
		t.Fatalf("AppendEvent: %v", err)
	}

	beat := make(chan error, 1)
	go func() {
		var err error
		defer func() { beat <- err }()
		_, err = l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, time.Minute)
	}()
	pgtest.AwaitLockWaiters(t, pool, "HeartbeatTask")
	finish := make(chan error, 1)
	go func() {
		var err error
		defer func() { finish <- err }()
		_, err = l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	}()
	awaitWaitersOrDone(t, pool, 2, nil) // HeartbeatTask for the AppendEvent, FinishTask for the tuple

	if err := update.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A heartbeat that holds the newest version has nothing left to wait
	// for and answers now; one that queued for the tuple lock behind
	// FinishTask answers once the admission commits (ErrStaleToken), and
	// the one that did both deadlocked then.
	var beatErr error
	beatDone := false
	select {
	case beatErr = <-beat:
		beatDone = true
	case <-time.After(3 * time.Second):
	}
	if err := admission.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !beatDone {
		beatErr = <-beat
	}
	if beatErr != nil && !errors.Is(beatErr, ratelimit.ErrStaleToken) {
		t.Errorf("HeartbeatTask: %v", beatErr)
	}
	if err := <-finish; err != nil {
		t.Errorf("FinishTask: %v", err)
	}
	if got := getTask(t, l, task.ID); got.Status != ratelimit.TaskSucceeded {
		t.Errorf("task %s is %s, want succeeded", got.ID, got.Status)
	}
	assertNothingHeld(t, pool, "key", key)
	assertDoctorOK(t, pool)
}
