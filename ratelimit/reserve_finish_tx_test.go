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

// Inside a caller's transaction, a Reserve for a task is refused with
// ErrTaskFinished in two ways, and they leave the transaction in different
// states. A task already finished when the Reserve starts is refused by
// the first check, a refusal row: the transaction goes on. A task that
// FinishTask finished while the Reserve waited for a counter is refused by
// the recheck (SQLSTATE P0T01), an error raised in the statement: like any
// statement error, it ends the transaction (the next statement in it
// fails, 25P02), as Reserve's doc says.
func TestReserveInATransactionRefusedByTheRecheckEndsTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool)
	key := uniqueKey("k")
	limits := hourLimits(t, pool, window("key", key, "requests", 100, 1))
	next := func(lt *ratelimit.Limiter) error {
		_, err := lt.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{queueLimit(uniqueKey("q"), 10)}})
		return err
	}

	// Finished before: the transaction goes on.
	task := startSync(t, l, time.Minute)
	if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	lt := l.WithTx(tx)
	if _, err := lt.Reserve(ctx, task.ID, task.AttemptID, limits); !errors.Is(err, ratelimit.ErrTaskFinished) {
		t.Fatalf("Reserve in a transaction for a finished task: %v, want ErrTaskFinished", err)
	}
	if err := next(lt); err != nil {
		t.Errorf("the transaction after the first check's refusal: %v, want it to go on", err)
	}
	_ = tx.Rollback(ctx)

	// Finished while the Reserve waited: the transaction is over.
	task = startSync(t, l, time.Minute)
	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(ctx) }()
	if _, err := l.WithTx(blocker).Reserve(ctx, "", "", limits); err != nil {
		t.Fatal(err)
	}
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	lt = l.WithTx(tx)
	errs := make(chan error, 1)
	go func() { _, err := lt.Reserve(ctx, task.ID, task.AttemptID, limits); errs <- err }()
	pgtest.AwaitLockWaiters(t, pool, "Reserve")
	if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := <-errs; !errors.Is(err, ratelimit.ErrTaskFinished) || !errors.As(err, &pgErr) || pgErr.Code != "P0T01" {
		t.Fatalf("Reserve in a transaction for a task finished while it waited: %v, want ErrTaskFinished with SQLSTATE P0T01", err)
	}
	if err := next(lt); !errors.As(err, &pgErr) || pgErr.Code != "25P02" {
		t.Errorf("the transaction after the recheck's refusal: %v, want it over (25P02)", err)
	}
	assertNothingHeld(t, pool, "key", key)
}
