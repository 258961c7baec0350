package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Prune deletes finished tasks without waiting for a task row another
// transaction holds (a Reserve's foreign-key check holds it FOR KEY SHARE
// while its statement runs): such a task is left for the next run. It
// waited, and a combined Reserve naming two of a batch's tasks in the
// other order deadlocked with it (CI: "prune: tasks: deadlock detected").
func TestPruneSkipsAFinishedTaskWhoseRowIsHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithMaintenanceLockTimeout(lockBound), ratelimit.WithTaskRetention(time.Hour))
	var tasks []ratelimit.Task
	for range 2 {
		task := startSync(t, l, time.Minute)
		if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, task)
	}
	clock.advance(2 * time.Hour)
	tx := heldTx(t, pool)
	if n, err := testq.OpsKeyShareTask(ctx, tx, mustUUID(t, tasks[0].ID)); err != nil || n != 1 {
		t.Fatalf("OpsKeyShareTask = %d, %v", n, err)
	}
	res, err := m.Prune(ctx, 24*time.Hour)
	if err != nil || res.Tasks != 1 {
		t.Fatalf("Prune with one finished task's row held: %+v, %v; want the other deleted, nothing waited for", res, err)
	}
	if _, err := l.GetTask(ctx, tasks[0].ID); err != nil {
		t.Fatalf("the held task: %v, want it kept", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := m.Prune(ctx, 24*time.Hour); err != nil || res.Tasks != 1 {
		t.Fatalf("Prune once the row is free: %+v, %v; want the held task deleted", res, err)
	}
	if n := rowCounts(t, pool).Tasks; n != 0 {
		t.Errorf("%d tasks left, want 0", n)
	}
}
