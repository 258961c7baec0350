package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	assertRefusedNotDeadlocked(t, tx, "the second FinishTask", err, "the batch", batch)
	// The second task, finished in a transaction of its own.
	if _, err := l.FinishTask(ctx, t2.ID, t2.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil && !errors.Is(err, ratelimit.ErrStaleToken) {
		t.Fatalf("FinishTask of the second task: %v", err)
	}
	assertNothingHeld(t, pool, "key", key)
	assertDoctorOK(t, pool)
}

// assertRefusedNotDeadlocked checks that op, run in tx (err) while a
// partner in another session (name, whose error partner gives) waited for
// a lock tx held, was refused with ErrLockOrder rather than deadlocking
// with it; commits tx, unless the server aborted it; and checks that the
// partner did not deadlock either.
func assertRefusedNotDeadlocked(t *testing.T, tx pgx.Tx, op string, err error, name string, partner <-chan error) {
	t.Helper()
	if isDeadlock(err) {
		t.Errorf("%s in the transaction deadlocked: %v", op, err)
	} else if !errors.Is(err, ratelimit.ErrLockOrder) {
		t.Errorf("%s in the transaction: %v, want ErrLockOrder", op, err)
	}
	if !isDeadlock(err) {
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	if err := <-partner; isDeadlock(err) {
		t.Errorf("%s deadlocked: %v", name, err)
	}
}

// isDeadlock reports a deadlock the server detected (SQLSTATE 40P01).
func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}
