package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// FinishTask in a REPEATABLE READ transaction read the task's leases and
// reservations as of the transaction's snapshot: a lease a Reserve for the
// task committed after that snapshot was left live on the finished task
// (its concurrency slot held until Recover), although WithTx says such a
// transaction gets ErrIsolation. Now FinishTask refuses outside READ
// COMMITTED with ErrIsolation, and writes nothing.
func TestFinishTaskRefusesOtherIsolationLevels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool)
	key := uniqueKey("finishrr")
	task := startSync(t, l, time.Minute)

	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	lt := l.WithTx(tx)
	if _, err := lt.GetTask(ctx, task.ID); err != nil { // takes the transaction's snapshot
		t.Fatal(err)
	}
	// The worker takes a slot for the task after that snapshot.
	if _, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{concurrent("model", key, 1)}); err != nil {
		t.Fatal(err)
	}
	res, err := lt.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if !errors.Is(err, ratelimit.ErrIsolation) {
		_ = tx.Commit(ctx)
		report, _ := ratelimit.NewMaintenance(pool).Doctor(ctx)
		t.Fatalf("FinishTask in a REPEATABLE READ transaction = %+v, %v; want ErrIsolation (after its commit: %v)", res, err, report)
	}
	_ = tx.Rollback(ctx)
	if got := getTask(t, l, task.ID); got.Status != ratelimit.TaskRunning || got.LastEventSeq != 1 {
		t.Fatalf("the refused FinishTask changed the task: %+v", got)
	}
	res, err = l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if err != nil || res.ReleasedLeases != 1 {
		t.Fatalf("FinishTask in READ COMMITTED = %+v, %v; want the lease released", res, err)
	}
}
