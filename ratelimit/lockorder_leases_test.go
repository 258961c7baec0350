package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Several leases are locked in id order (the global lock order, as the
// README says: "several leases in id order"), each statement that locks
// more than one taking them so. A caller's transaction that settles two
// grants of one task, the one with the higher lease id first, holds that
// lease while it waits for the lower one; FinishTask of the task, locking
// the task's leases in id order, holds the lower one while it waits for the
// higher: a deadlock. The second settle must be refused before it runs
// (*LockOrderError), not run into the deadlock.
func TestSettlingLeasesOutOfIDOrderInATransactionIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	task := startSync(t, l, time.Minute)
	reserve := func() ratelimit.Grant {
		g, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{concurrent("model", uniqueKey("m"), 5)})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	low, high := reserve(), reserve()
	if low.Leases[0].ID > high.Leases[0].ID {
		low, high = high, low
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	lt := l.WithTx(tx)
	if _, err := lt.Commit(ctx, high, nil); err != nil {
		t.Fatalf("Commit of the grant with the higher lease id: %v", err)
	}
	finished := make(chan error, 1)
	go func() {
		_, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
		finished <- err
	}()
	pgtest.AwaitLockWaiters(t, pool, "FinishTask")
	_, err = lt.Commit(ctx, low, nil)
	assertRefusedNotDeadlocked(t, tx, "the second Commit", err, "FinishTask", finished)
}
