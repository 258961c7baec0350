package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// FinishTask locks its task row FOR UPDATE, which waits for the FOR KEY
// SHARE that an admission's inserts take on their task, and a combined
// batch takes its tasks' rows in its admissions' order. A caller's
// transaction that finishes two tasks holds the first's row while it
// waits for the second's; a batch for both, the second task first, holds
// the second's row while it waits for the first's: a deadlock. Before,
// FinishTask's FOR NO KEY UPDATE did not conflict with the batch, which
// went on. Now the second FinishTask in one transaction is refused before
// it runs (*LockOrderError), and nobody deadlocks.
func TestFinishTaskTwiceInATransactionDoesNotDeadlockWithABatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool)
	key := uniqueKey("k")
	limits := hourLimits(t, pool, window("key", key, "requests", 100, 1))
	t1, t2 := startSync(t, l, time.Minute), startSync(t, l, time.Minute)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	lt := l.WithTx(tx)
	if _, err := lt.FinishTask(ctx, t1.ID, t1.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatalf("FinishTask of the first task: %v", err)
	}
	batch := make(chan error, 1)
	go func() {
		_, _, err := l.ReserveCombined(ctx, []ratelimit.BatchRequest{
			{TaskID: t2.ID, AttemptID: t2.AttemptID, Limits: limits},
			{TaskID: t1.ID, AttemptID: t1.AttemptID, Limits: limits},
		})
		batch <- err
	}()
	pgtest.AwaitLockWaiters(t, pool, "the batch")
	_, err = lt.FinishTask(ctx, t2.ID, t2.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if isDeadlock(err) {
		t.Errorf("the second FinishTask in the transaction deadlocked: %v", err)
	} else if !errors.Is(err, ratelimit.ErrLockOrder) {
		t.Errorf("the second FinishTask in the transaction: %v, want ErrLockOrder", err)
	}
	if err == nil || !isDeadlock(err) {
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	if err := <-batch; isDeadlock(err) {
		t.Errorf("the batch deadlocked: %v", err)
	}
	// The second task, finished in a transaction of its own.
	if _, err := l.FinishTask(ctx, t2.ID, t2.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil && !errors.Is(err, ratelimit.ErrStaleToken) {
		t.Fatalf("FinishTask of the second task: %v", err)
	}
	assertNothingHeld(t, pool, "key", key)
	assertDoctorOK(t, pool)
}

// isDeadlock reports a deadlock the server detected (SQLSTATE 40P01).
func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}
